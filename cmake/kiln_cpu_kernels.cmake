# Builds vectorised CPU kernel sources once per CPU capability, as ATen does:
# DEFAULT everywhere, AVX2 and AVX512 on x86-64. Each build puts its functions in
# namespace kiln::ops::cpu::<base|avx2|avx512>; lib/ops/cpu_capability.h picks one
# at run time. Kernel files see raw pointers and ATen's header-only vec library.
set(KILN_CPU_CAPABILITIES base)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  list(APPEND KILN_CPU_CAPABILITIES avx2 avx512)
endif()

function(kiln_add_cpu_kernels target)
  foreach(cap IN LISTS KILN_CPU_CAPABILITIES)
    set(obj ${target}_cpu_${cap})
    add_library(${obj} OBJECT ${ARGN})
    target_include_directories(${obj} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
    target_compile_definitions(${obj} PRIVATE KILN_CPU_NS=${cap} ${KILN_CPU_HAVE_DEFS})
    # -Wno-psabi: GCC notes that the vector-argument ABI changed in GCC 4.6.
    target_link_libraries(${obj} PRIVATE kiln_warnings)
    target_compile_options(${obj} PRIVATE -Wno-psabi)
    if(cap STREQUAL "base")
      target_compile_definitions(${obj} PRIVATE CPU_CAPABILITY=DEFAULT)
    elseif(cap STREQUAL "avx2")
      target_compile_definitions(${obj} PRIVATE CPU_CAPABILITY=AVX2 CPU_CAPABILITY_AVX2)
      target_compile_options(${obj} PRIVATE -mavx2 -mfma -mf16c)
    elseif(cap STREQUAL "avx512")
      target_compile_definitions(${obj} PRIVATE CPU_CAPABILITY=AVX512 CPU_CAPABILITY_AVX512)
      # -Wno-(maybe-)uninitialized: GCC 12 warns inside its own avx512fintrin.h
      # (_mm512_undefined_ps), a known false positive.
      target_compile_options(${obj} PRIVATE -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
                             -Wno-maybe-uninitialized -Wno-uninitialized)
    endif()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${obj}>)
  endforeach()
endfunction()

set(KILN_CPU_HAVE_DEFS "")
if("avx2" IN_LIST KILN_CPU_CAPABILITIES)
  list(APPEND KILN_CPU_HAVE_DEFS KILN_HAVE_CPU_AVX2)
endif()
if("avx512" IN_LIST KILN_CPU_CAPABILITIES)
  list(APPEND KILN_CPU_HAVE_DEFS KILN_HAVE_CPU_AVX512)
endif()
