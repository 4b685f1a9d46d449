// What every back end shares: the row grouping of the backward, the
// threading rule, the workspace and the registry of back ends.
#include <algorithm>
#include <array>

#include "common/parallel.h"
#include "kernels/kernels.h"

namespace tokpos::kernels {

int threads_for(const Exec& ex, int64_t work) {
  return detail::threads_for(work, ex.threads);
}

int64_t RowGroups::max_sources() const {
  int64_t m = 0;
  for (size_t g = 0; g + 1 < start.size(); ++g) m = std::max(m, sources(g));
  return m;
}

RowGroups group_rows(const int64_t* rows, int64_t N, int64_t V) {
  RowGroups p;
  p.order.reserve(static_cast<size_t>(N));
  if (V <= 4 * N) {
    std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) ++start[rows[i] + 1];
    for (int64_t v = 0; v < V; ++v) start[v + 1] += start[v];
    p.order.resize(static_cast<size_t>(start[V]));
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) p.order[fill[rows[i]]++] = i;
    for (int64_t v = 0; v < V; ++v) {
      if (start[v + 1] > start[v]) {
        p.rows.push_back(v);
        p.start.push_back(start[v]);
      }
    }
  } else {
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] >= 0) p.order.push_back(i);
    std::stable_sort(p.order.begin(), p.order.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
    for (size_t k = 0; k < p.order.size(); ++k) {
      if (k == 0 || rows[p.order[k]] != rows[p.order[k - 1]]) {
        p.rows.push_back(rows[p.order[k]]);
        p.start.push_back(static_cast<int64_t>(k));
      }
    }
  }
  p.start.push_back(static_cast<int64_t>(p.order.size()));
  return p;
}

size_t Workspace::bytes() const {
  return owner.capacity() * sizeof(int32_t) +
         (mine.capacity() + mine_start.capacity() + tag.capacity() + tasks.capacity() + hot.capacity()) *
             sizeof(int64_t) +
         scratch.capacity() * sizeof(float) + uses.capacity();
}

void Workspace::release() {
  *this = Workspace{};
}

std::span<const KernelTable* const> backends() {
  static const std::array<const KernelTable*, 2> all{&reference_kernels(), &cpu_kernels()};
  return all;
}

const KernelTable& active_kernels() {
  return cpu_kernels();
}

}  // namespace tokpos::kernels
