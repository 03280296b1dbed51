# find_package(Torch) for the engine's build and for its consumers
# (DistEngineConfig.cmake), past two traps of a machine that also has
# Debian's libtorch-dev or an older NCCL:
# - TorchConfig.cmake looks for libtorch and libc10 with find_library, whose
#   system prefixes come before TorchConfig's own lib/ folder: Debian's 1.13
#   libraries in /usr/lib would be linked beside the official headers. The
#   system paths are switched off while Torch is found.
# - A wheel's libtorch_cuda.so needs the NCCL, CUDA runtime and cuDNN of the
#   wheel's NVIDIA packages (site-packages/nvidia/*/lib, on its RPATH at run
#   time); the linker resolves them on its own search path instead, where the
#   CUDA toolkit's older NCCL lacks symbols LibTorch uses. DIST_ENGINE_TORCH_LINK_OPTIONS
#   points the linker at the wheel's (-rpath-link).
# And one of a CUDA LibTorch with CMake before 3.26: its config probes nvcc
# at CMAKE_CUDA_STANDARD, which it sets to the C++ standard when unset, and
# CMake 3.25 knows no flag for CUDA 20; the engine compiles no CUDA, so the
# probe runs at 17 unless the project chose a standard.
macro(dist_engine_find_torch)
  set(_dist_engine_saved_system_path "${CMAKE_FIND_USE_CMAKE_SYSTEM_PATH}")
  set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH OFF)
  set(_dist_engine_cuda_standard_unset FALSE)
  if(NOT DEFINED CMAKE_CUDA_STANDARD)
    set(_dist_engine_cuda_standard_unset TRUE)
    set(CMAKE_CUDA_STANDARD 17)
  endif()
  find_package(Torch ${ARGN})
  set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH "${_dist_engine_saved_system_path}")
  if(_dist_engine_cuda_standard_unset)
    unset(CMAKE_CUDA_STANDARD)
  endif()

  get_filename_component(_dist_engine_torch_lib "${TORCH_LIBRARY}" DIRECTORY)
  set(DIST_ENGINE_TORCH_LINK_OPTIONS "")
  file(GLOB _dist_engine_nvidia_libs LIST_DIRECTORIES true "${_dist_engine_torch_lib}/../../nvidia/*/lib")
  foreach(_dist_engine_lib IN LISTS _dist_engine_nvidia_libs)
    get_filename_component(_dist_engine_lib "${_dist_engine_lib}" REALPATH)
    list(APPEND DIST_ENGINE_TORCH_LINK_OPTIONS "LINKER:-rpath-link,${_dist_engine_lib}")
  endforeach()
endmacro()
