# find_package(Torch) for the libtorch inside a PyTorch wheel (decision 0020): TRAINYARD_LIBTORCH
# is the wheel's torch/ directory (include/ and lib/): scripts/install-deps unpacks the CPU part
# of PyPI's torch there (.deps/libtorch-<version>), or point it at an installed torch package
# (python -c 'import torch, os; print(os.path.dirname(torch.__file__))') to build for its GPUs.
# The wheel's own TorchConfig.cmake cannot be used: for a CUDA build it needs the CUDA toolkit
# at configure time, which the CPU machines that build and test Trainyard do not have.
#
# Sets TORCH_FOUND, TORCH_INCLUDE_DIRS and TORCH_LIBRARIES (libtorch_cpu and libc10, plus
# libtorch_cuda and libc10_cuda when lib/ has them), with the wheel's lib/ as the run path.
set(_ty_torch "${TRAINYARD_LIBTORCH}")
if(NOT EXISTS "${_ty_torch}/lib/libtorch_cpu.so" OR NOT EXISTS "${_ty_torch}/include/torch")
  set(Torch_FOUND FALSE)
  set(Torch_NOT_FOUND_MESSAGE "no libtorch at TRAINYARD_LIBTORCH=${_ty_torch} (lib/libtorch_cpu.so, include/torch); run scripts/install-deps")
  return()
endif()
# The wheel's include/ carries its own {fmt} (a newer major than Debian's libfmt-dev, which our
# spdlog is built against): expose every entry but fmt/ through a folder of links.
# The links are made again when TRAINYARD_LIBTORCH changes (the stamp names their target).
set(_ty_inc "${CMAKE_BINARY_DIR}/libtorch-include")
set(_ty_stamp "${CMAKE_BINARY_DIR}/libtorch-include.source")
set(_ty_was "")
if(EXISTS "${_ty_stamp}")
  file(READ "${_ty_stamp}" _ty_was)
endif()
if(NOT _ty_was STREQUAL _ty_torch OR NOT EXISTS "${_ty_inc}")
  file(REMOVE_RECURSE "${_ty_inc}")  # removes the links, not what they point to
  file(MAKE_DIRECTORY "${_ty_inc}")
  file(GLOB _ty_entries RELATIVE "${_ty_torch}/include" "${_ty_torch}/include/*")
  foreach(_e IN LISTS _ty_entries)
    if(NOT _e STREQUAL "fmt")
      file(CREATE_LINK "${_ty_torch}/include/${_e}" "${_ty_inc}/${_e}" SYMBOLIC)
    endif()
  endforeach()
  file(WRITE "${_ty_stamp}" "${_ty_torch}")
endif()
set(TORCH_FOUND TRUE)
set(TORCH_INCLUDE_DIRS "${_ty_inc}" "${_ty_torch}/include/torch/csrc/api/include")
set(TORCH_LIBRARIES "${_ty_torch}/lib/libtorch_cpu.so" "${_ty_torch}/lib/libc10.so")
if(EXISTS "${_ty_torch}/lib/libtorch_cuda.so")
  # Linked even though no symbol of ours needs them: loading them registers the CUDA backend.
  # Their own needs (cudart, cuBLAS, cuDNN, NCCL) resolve at run time through their run paths.
  list(APPEND TORCH_LIBRARIES -Wl,--no-as-needed "${_ty_torch}/lib/libtorch_cuda.so"
       "${_ty_torch}/lib/libc10_cuda.so" -Wl,--as-needed -Wl,--allow-shlib-undefined)
endif()
list(APPEND TORCH_LIBRARIES "-Wl,-rpath,${_ty_torch}/lib")
if(NOT TARGET trainyard_libtorch_flags)
  # What the wheel's config gives its users: the c10d parts it was built with.
  add_library(trainyard_libtorch_flags INTERFACE IMPORTED)
  set_target_properties(trainyard_libtorch_flags PROPERTIES
                        INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO")
endif()
list(APPEND TORCH_LIBRARIES trainyard_libtorch_flags)
