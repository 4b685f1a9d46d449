// The cpu back end's kernel table.
#include "kernels/kernels.h"

namespace tokpos::kernels {
namespace cpu {
void compose_forward(const Gather& g, const Exec& ex);
void compose_typed(const TypedGather& g, const Exec& ex);
void index_add_rows(const GradTarget& a, const GradTarget& b, const Source& src, const Exec& ex);
void apply_rope(const RopeApply& r, const Exec& ex);
void apply_rope_tables(const RopeTables& r, const Exec& ex);
void compose_quant(const QuantGather& q, const Exec& ex);  // quant.cc
void index_add_rows_f64(const GradTarget64& a, const GradTarget64& b, const Source64& src, const Exec& ex);
}  // namespace cpu

const KernelTable& cpu_kernels() {
  static const KernelTable table{"cpu",
                                 0.0,
                                 cpu::compose_forward,
                                 cpu::compose_typed,
                                 cpu::index_add_rows,
                                 cpu::apply_rope,
                                 cpu::compose_quant,
                                 cpu::index_add_rows_f64,
                                 cpu::apply_rope_tables};
  return table;
}

}  // namespace tokpos::kernels
