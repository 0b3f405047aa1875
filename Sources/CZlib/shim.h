#ifndef CAMRIG_CZLIB_SHIM_H
#define CAMRIG_CZLIB_SHIM_H
#include <zlib.h>
#endif
