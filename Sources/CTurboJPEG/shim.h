#ifndef CAMRIG_TURBOJPEG_SHIM_H
#define CAMRIG_TURBOJPEG_SHIM_H
#include <turbojpeg.h>
#endif
