// The soft provider's names for the saturating conversions of JS and peer numbers
// (native/convert.h has them and says why).
#pragma once

#include "../convert.h"

namespace soft {

using rdmajs::to_u32;
using rdmajs::to_u64;

}  // namespace soft
