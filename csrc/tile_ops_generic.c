/* The generic (any x86-64 or other CPU) tile operations for both precisions. */
#include <math.h>
#include "tile_ops.h"

#define real float
#define SUFFIX(name) name##_f32
#define EXP2 exp2f
#include "tile_ops_generic_template.h"
#undef real
#undef SUFFIX
#undef EXP2

#define real double
#define SUFFIX(name) name##_f64
#define EXP2 exp2
#include "tile_ops_generic_template.h"
