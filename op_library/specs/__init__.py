"""The registry entries of each area of the op library, one module per area; importing this
package registers them all (op_library.registry imports it)."""
from op_library.specs import activations, attention, data, elementwise, nn, norm, optim, reduce  # noqa: F401
