/* libcamera through pkg-config: this target only carries libcamera's compiler and linker flags (from
 * libcamera.pc) to CLibcamera, whose C++ includes libcamera's headers itself. Nothing is imported from it. */
