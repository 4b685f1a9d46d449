// tokpos._core: the rope bindings.
#include "bind.h"

namespace tokpos::python {

void bind_rope(nb::module_& m) { (void)m; }

}  // namespace tokpos::python
