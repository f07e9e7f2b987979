# Finds libtorch from the PyPI torch wheel (scripts/setup puts its CMake prefix on
# CMAKE_PREFIX_PATH). The wheel's libtorch is a CUDA build, so Torch's CMake needs the
# CUDA toolkit even when kiln's own kernels are off.
#
# CUDA 13 no longer ships the old nvToolsExt library that some Torch CMake configs
# still look for; nvtx3 is header-only, so we give Torch an interface target that
# points at the nvtx3 headers instead.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND AND NOT TARGET CUDA::nvToolsExt)
  find_path(KILN_NVTX3_INCLUDE nvtx3/nvToolsExt.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(KILN_NVTX3_INCLUDE)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_include_directories(CUDA::nvToolsExt INTERFACE ${KILN_NVTX3_INCLUDE})
    target_compile_definitions(CUDA::nvToolsExt INTERFACE NVTX3_ONLY=1)
  endif()
endif()
#
# Torch's CMake probes the installed GPUs unless TORCH_CUDA_ARCH_LIST is set, and
# it resets CMAKE_CUDA_ARCHITECTURES; we give it our list and restore ours after.
set(kiln_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "")
  foreach(arch IN LISTS kiln_cuda_archs)
    string(REGEX REPLACE "^([0-9]+)([0-9])$" "\\1.\\2" dotted "${arch}")
    list(APPEND TORCH_CUDA_ARCH_LIST "${dotted}")
  endforeach()
  if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
endif()
unset(CMAKE_CUDA_ARCHITECTURES)
find_package(Torch REQUIRED)
if(KILN_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES "${kiln_cuda_archs}")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
message(STATUS "kiln: found torch ${Torch_VERSION} in ${Torch_DIR}")

# The wheel's libtorch_cuda finds its CUDA libraries (a newer NCCL, cuDNN, …) in
# the nvidia/*/lib folders beside it through its own RPATH. The linker must see
# those same copies first, not the older ones of the system toolkit, and so must
# our binaries at run time.
get_filename_component(KILN_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
file(GLOB KILN_TORCH_NVIDIA_LIBDIRS LIST_DIRECTORIES true "${KILN_TORCH_ROOT}/../nvidia/*/lib")
if(KILN_TORCH_NVIDIA_LIBDIRS)
  list(JOIN KILN_TORCH_NVIDIA_LIBDIRS ":" kiln_joined)
  add_link_options("LINKER:-rpath-link,${kiln_joined}")
  list(PREPEND CMAKE_BUILD_RPATH ${KILN_TORCH_NVIDIA_LIBDIRS})
endif()

# torch 2.11's libtorch.so exports its own copy of std::filesystem (64 symbols),
# and a program that lists libtorch before libstdc++ calls into it and crashes
# (std::filesystem::remove_all). Putting libstdc++ first among every binary's
# needed libraries makes the dynamic linker find the real one first.
add_link_options("SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
