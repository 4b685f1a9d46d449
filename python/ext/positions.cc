// tokpos._core: the positions bindings.
#include "bind.h"

namespace tokpos::python {

void bind_positions(nb::module_& m) { (void)m; }

}  // namespace tokpos::python
