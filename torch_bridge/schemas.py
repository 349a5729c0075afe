"""The schema of every `torch.ops.npu.*` op: one table, op name -> schema string.

Names, argument names, order and defaults follow the op_library function (torch.nn.functional's /
torch's), minus legacy arguments (size_average, reduce, _stacklevel, inplace, cores); the npu_* ops
use torch_npu's exact schemas. An op whose name has a dot is an overload (`max.dim`).

`VARIANTS` maps the registry entries that are not op names (matrix variants and adapters) onto the
op they test, so `op_library.registry.REGISTRY` stays the single source of kernels, dtypes and
samples: tests assert every registry entry is in `SCHEMAS` or in `VARIANTS`.

`EXTRA` lists the ops that have no registry entry of their own (torch_npu extras, overloads, the
single-tensor optimizer steps), each with the registry entry whose kernels it runs (None: none).
"""
from __future__ import annotations

_ADAM_KW = ("bool amsgrad, float beta1, float beta2, float lr, float weight_decay, float eps, bool maximize")
_SGD_KW = "float weight_decay, float momentum, float lr, float dampening, bool nesterov, bool maximize"

SCHEMAS: dict[str, str] = {
    # --- unary math and activations (op_library.activations)
    "abs": "abs(Tensor input) -> Tensor",
    "neg": "neg(Tensor input) -> Tensor",
    "sign": "sign(Tensor input) -> Tensor",
    "exp": "exp(Tensor input) -> Tensor",
    "expm1": "expm1(Tensor input) -> Tensor",
    "log": "log(Tensor input) -> Tensor",
    "log1p": "log1p(Tensor input) -> Tensor",
    "sqrt": "sqrt(Tensor input) -> Tensor",
    "rsqrt": "rsqrt(Tensor input) -> Tensor",
    "reciprocal": "reciprocal(Tensor input) -> Tensor",
    "sin": "sin(Tensor input) -> Tensor",
    "cos": "cos(Tensor input) -> Tensor",
    "tanh": "tanh(Tensor input) -> Tensor",
    "erf": "erf(Tensor input) -> Tensor",
    "sigmoid": "sigmoid(Tensor input) -> Tensor",
    "floor": "floor(Tensor input) -> Tensor",
    "ceil": "ceil(Tensor input) -> Tensor",
    "trunc": "trunc(Tensor input) -> Tensor",
    "round": "round(Tensor input, *, int decimals=0) -> Tensor",
    "relu": "relu(Tensor input) -> Tensor",
    "leaky_relu": "leaky_relu(Tensor input, float negative_slope=0.01) -> Tensor",
    "elu": "elu(Tensor input, float alpha=1.0) -> Tensor",
    "gelu": "gelu(Tensor input, str approximate='none') -> Tensor",
    "silu": "silu(Tensor input) -> Tensor",
    "softplus": "softplus(Tensor input, float beta=1.0, float threshold=20.0) -> Tensor",
    "hardswish": "hardswish(Tensor input) -> Tensor",
    "npu_gelu": "npu_gelu(Tensor self, *, str approximate='none') -> Tensor",
    "npu_swiglu": "npu_swiglu(Tensor self, int dim=-1) -> Tensor",
    # --- elementwise arithmetic, comparisons, casts (op_library.elementwise)
    "add": "add(Tensor input, Tensor other, *, Scalar alpha=1) -> Tensor",
    "sub": "sub(Tensor input, Tensor other, *, Scalar alpha=1) -> Tensor",
    "mul": "mul(Tensor input, Tensor other) -> Tensor",
    "div": "div(Tensor input, Tensor other, *, str? rounding_mode=None) -> Tensor",
    "maximum": "maximum(Tensor input, Tensor other) -> Tensor",
    "minimum": "minimum(Tensor input, Tensor other) -> Tensor",
    "pow": "pow(Tensor input, Tensor exponent) -> Tensor",
    "where": "where(Tensor condition, Tensor input, Tensor other) -> Tensor",
    "masked_fill": "masked_fill(Tensor input, Tensor mask, Scalar value) -> Tensor",
    "clamp": "clamp(Tensor input, Scalar? min=None, Scalar? max=None) -> Tensor",
    "eq": "eq(Tensor input, Tensor other) -> Tensor",
    "ne": "ne(Tensor input, Tensor other) -> Tensor",
    "lt": "lt(Tensor input, Tensor other) -> Tensor",
    "le": "le(Tensor input, Tensor other) -> Tensor",
    "gt": "gt(Tensor input, Tensor other) -> Tensor",
    "ge": "ge(Tensor input, Tensor other) -> Tensor",
    "logical_and": "logical_and(Tensor input, Tensor other) -> Tensor",
    "logical_or": "logical_or(Tensor input, Tensor other) -> Tensor",
    "logical_xor": "logical_xor(Tensor input, Tensor other) -> Tensor",
    "logical_not": "logical_not(Tensor input) -> Tensor",
    # ... with a Python number for one operand (torch's .Scalar overloads)
    "add.Scalar": "add.Scalar(Tensor input, Scalar other, *, Scalar alpha=1) -> Tensor",
    "sub.Scalar": "sub.Scalar(Tensor input, Scalar other, *, Scalar alpha=1) -> Tensor",
    "mul.Scalar": "mul.Scalar(Tensor input, Scalar other) -> Tensor",
    "div.Scalar": "div.Scalar(Tensor input, Scalar other, *, str? rounding_mode=None) -> Tensor",
    "pow.Tensor_Scalar": "pow.Tensor_Scalar(Tensor input, Scalar exponent) -> Tensor",
    "pow.Scalar": "pow.Scalar(Scalar input, Tensor exponent) -> Tensor",
    "clamp.Tensor": "clamp.Tensor(Tensor input, Tensor? min=None, Tensor? max=None) -> Tensor",
    "eq.Scalar": "eq.Scalar(Tensor input, Scalar other) -> Tensor",
    "ne.Scalar": "ne.Scalar(Tensor input, Scalar other) -> Tensor",
    "lt.Scalar": "lt.Scalar(Tensor input, Scalar other) -> Tensor",
    "le.Scalar": "le.Scalar(Tensor input, Scalar other) -> Tensor",
    "gt.Scalar": "gt.Scalar(Tensor input, Scalar other) -> Tensor",
    "ge.Scalar": "ge.Scalar(Tensor input, Scalar other) -> Tensor",
    "npu_dtype_cast": "npu_dtype_cast(Tensor self, ScalarType dtype) -> Tensor",
    "sum_to_size": "sum_to_size(Tensor grad, int[] size, ScalarType? dtype=None) -> Tensor",
    # --- reductions (op_library.reduce)
    "sum": "sum(Tensor input, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "mean": "mean(Tensor input, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "amax": "amax(Tensor input, int[1] dim=[], bool keepdim=False) -> Tensor",
    "amin": "amin(Tensor input, int[1] dim=[], bool keepdim=False) -> Tensor",
    "argmax": "argmax(Tensor input, int? dim=None, bool keepdim=False) -> Tensor",
    "argmin": "argmin(Tensor input, int? dim=None, bool keepdim=False) -> Tensor",
    "max": "max(Tensor input) -> Tensor",
    "max.dim": "max.dim(Tensor input, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "min": "min(Tensor input) -> Tensor",
    "min.dim": "min.dim(Tensor input, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "var": "var(Tensor input, int[1]? dim=None, bool keepdim=False, *, Scalar? correction=None) -> Tensor",
    "std": "std(Tensor input, int[1]? dim=None, bool keepdim=False, *, Scalar? correction=None) -> Tensor",
    "logsumexp": "logsumexp(Tensor input, int[1] dim, bool keepdim=False) -> Tensor",
    "norm": "norm(Tensor input, Scalar p=2, int[1]? dim=None, bool keepdim=False) -> Tensor",
    "cumsum": "cumsum(Tensor input, int dim, *, ScalarType? dtype=None) -> Tensor",
    # --- softmax and normalisations (op_library.norm, op_library.norm_bn)
    "softmax": "softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor",
    "log_softmax": "log_softmax(Tensor input, int dim, ScalarType? dtype=None) -> Tensor",
    "layer_norm": "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
                  "float eps=1e-05) -> Tensor",
    "rms_norm": "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
    "npu_rms_norm": "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
    "npu_add_rms_norm": "npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) "
                        "-> (Tensor, Tensor, Tensor)",
    "npu_scaled_masked_softmax": "npu_scaled_masked_softmax(Tensor x, Tensor mask, Scalar scale=1, "
                                 "bool fixed_triu_mask=False) -> Tensor",
    "batch_norm": "batch_norm(Tensor input, Tensor(a!)? running_mean, Tensor(b!)? running_var, Tensor? weight=None, "
                  "Tensor? bias=None, bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor",
    "group_norm": "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
                  "float eps=1e-05) -> Tensor",
    # --- cube ops (op_library.matmul, op_library.conv)
    "matmul": "matmul(Tensor a, Tensor b, bool transpose_a=False, bool transpose_b=False) -> Tensor",
    "bmm": "bmm(Tensor a, Tensor b) -> Tensor",
    "linear": "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "npu_linear": "npu_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "conv2d": "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
              "int[2] dilation=1, int groups=1) -> Tensor",
    # --- pooling (op_library.pool, op_library.data_nn)
    "max_pool2d": "max_pool2d(Tensor input, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
                  "int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
    "avg_pool2d": "avg_pool2d(Tensor input, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
                  "bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor",
    "adaptive_avg_pool2d": "adaptive_avg_pool2d(Tensor input, int[2] output_size) -> Tensor",
    "npu_rotary_mul": "npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor",
    # --- attention (op_library.attention)
    "scaled_dot_product_attention": "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
                                    "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
                                    "float? scale=None, bool enable_gqa=False) -> Tensor",
    "npu_fusion_attention": "npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, "
                            "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
                            "float scale=1., float keep_prob=1., int pre_tockens=2147483647, "
                            "int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
                            "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
                            "bool gen_mask_parallel=True, bool sync=False) "
                            "-> (Tensor, Tensor, Tensor, Tensor, int, int, int)",
    "npu_fusion_attention_grad": "npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, "
                                 "int head_num, str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, "
                                 "Tensor? atten_mask=None, Tensor? softmax_max=None, Tensor? softmax_sum=None, "
                                 "Tensor? softmax_in=None, Tensor? attention_in=None, float scale_value=1., "
                                 "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
                                 "int inner_precise=0, int seed=0, int offset=0, int numels=0, int[]? prefix=None, "
                                 "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
                                 "bool gen_mask_parallel=True, bool sync=False) -> (Tensor, Tensor, Tensor, Tensor)",
    # --- embedding, losses, dropout (op_library.nn)
    "embedding": "embedding(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None, "
                 "float norm_type=2.0, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
    "cross_entropy": "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, "
                     "str reduction='mean', float label_smoothing=0.0) -> Tensor",
    "nll_loss": "nll_loss(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, "
                "str reduction='mean') -> Tensor",
    "mse_loss": "mse_loss(Tensor input, Tensor target, str reduction='mean', Tensor? weight=None) -> Tensor",
    "dropout": "dropout(Tensor input, float p=0.5, bool training=True) -> Tensor",
    "native_dropout": "native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
    # --- data movement (op_library.data)
    "cat": "cat(Tensor[] tensors, int dim=0) -> Tensor",
    "stack": "stack(Tensor[] tensors, int dim=0) -> Tensor",
    "permute": "permute(Tensor input, int[] dims) -> Tensor",
    "transpose": "transpose(Tensor input, int dim0, int dim1) -> Tensor",
    "index_select": "index_select(Tensor input, int dim, Tensor index) -> Tensor",
    "gather": "gather(Tensor input, int dim, Tensor index) -> Tensor",
    "scatter_add": "scatter_add(Tensor input, int dim, Tensor index, Tensor src) -> Tensor",
    "tril": "tril(Tensor input, int diagonal=0) -> Tensor",
    "triu": "triu(Tensor input, int diagonal=0) -> Tensor",
    "pad": "pad(Tensor input, int[] pad, str mode='constant', float? value=None) -> Tensor",
    "arange": "arange(Scalar start=0, Scalar? end=None, Scalar step=1, *, ScalarType? dtype=None) -> Tensor",
    "full": "full(int[] size, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor",
    "fill_": "fill_(Tensor(a!) input, Scalar value) -> ()",
    # --- optimizer steps, in place (op_library.optim): list forms (one launch for packed lists) ...
    "adamw": "adamw(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
             f"Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, {_ADAM_KW}) -> ()",
    "adam": "adam(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
            f"Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, {_ADAM_KW}, "
            "bool decoupled_weight_decay=False) -> ()",
    "sgd": "sgd(Tensor(a!)[] params, Tensor[] d_p_list, Tensor(b!)[] momentum_buffer_list, *, "
           f"{_SGD_KW}, bool is_first_step=False) -> ()",
    # ... one-tensor forms ...
    "adamw_": "adamw_(Tensor(a!) param, Tensor grad, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, "
              f"Tensor(d!)? max_exp_avg_sq, Tensor(e!) step, *, {_ADAM_KW}) -> ()",
    "adam_": "adam_(Tensor(a!) param, Tensor grad, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, "
             f"Tensor(d!)? max_exp_avg_sq, Tensor(e!) step, *, {_ADAM_KW}, bool decoupled_weight_decay=False) -> ()",
    "sgd_": "sgd_(Tensor(a!) param, Tensor grad, Tensor(b!)? momentum_buffer, *, "
            f"{_SGD_KW}, bool is_first_step=False) -> ()",
    # ... and torch_npu's (var, m, v updated in place; beta*_power = beta*^(step - 1), as torch_npu)
    "npu_apply_adam_w.out": "npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, "
                            "Scalar weight_decay, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
                            "Tensor? max_grad_norm, bool? amsgrad, bool? maximize, *, Tensor(a!) var, "
                            "Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))",
}

# registry entries that are not op names -> the op that covers them
VARIANTS: dict[str, str] = {
    "gelu_tanh": "gelu",                       # gelu(approximate='tanh')
    "round_decimals": "round",                 # round(decimals=2)
    "round_decimals_neg": "round",             # round(decimals=-1)
    "softplus_beta": "softplus",               # softplus(beta, threshold)
    "sdpa": "scaled_dot_product_attention",
}

# ops with no registry entry of their own -> the registry entry whose kernels they run (None: none)
EXTRA: dict[str, str | None] = {
    "max.dim": "max", "min.dim": "min", "npu_linear": "linear",
    "scaled_dot_product_attention": "sdpa", "npu_fusion_attention_grad": "npu_fusion_attention",
    "adamw_": "adamw", "adam_": "adam", "sgd_": "sgd", "npu_apply_adam_w.out": "adamw",
    "add.Scalar": "add", "sub.Scalar": "sub", "mul.Scalar": "mul", "div.Scalar": "div", "pow.Tensor_Scalar": "pow",
    "pow.Scalar": "pow", "clamp.Tensor": "clamp", "eq.Scalar": "eq", "ne.Scalar": "ne", "lt.Scalar": "lt",
    "le.Scalar": "le", "gt.Scalar": "gt", "ge.Scalar": "ge",
}


def op_name(qualified: str) -> str:
    """'max.dim' -> 'max' (the op's name without its overload)."""
    return qualified.split(".", 1)[0]
