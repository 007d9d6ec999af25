// Splits n_rows query rows into groups of at most kMaxRows and calls a kernel instantiated for
// each group's size, so its accumulators stay in registers. Templates only: each ISA file
// instantiates it with its own lambdas, so no code compiled for one ISA is shared with another.
#pragma once

namespace inferd::kernels {

// Calls fn.template operator()<NR>(row0) for each group; NR <= kMaxRows <= 8 (kernels with more
// accumulators per row take fewer rows at a time).
template <int kMaxRows = 8, typename Fn>
inline void for_row_groups(int n_rows, Fn fn) {
  static_assert(kMaxRows >= 1 && kMaxRows <= 8);
  const auto call = [&]<int NR>(int r0) {
    if constexpr (NR <= kMaxRows) fn.template operator()<NR>(r0);
  };
  for (int r0 = 0; r0 < n_rows; r0 += kMaxRows) {
    switch (n_rows - r0 < kMaxRows ? n_rows - r0 : kMaxRows) {
      case 8:
        call.template operator()<8>(r0);
        break;
      case 7:
        call.template operator()<7>(r0);
        break;
      case 6:
        call.template operator()<6>(r0);
        break;
      case 5:
        call.template operator()<5>(r0);
        break;
      case 4:
        call.template operator()<4>(r0);
        break;
      case 3:
        call.template operator()<3>(r0);
        break;
      case 2:
        call.template operator()<2>(r0);
        break;
      default:
        call.template operator()<1>(r0);
        break;
    }
  }
}

}  // namespace inferd::kernels
