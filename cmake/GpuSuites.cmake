# The suites the GPU runner (ci/gpu.sh) runs, built with CMake where no Bazel
# is: the collectives' and sharded-training properties, the table of bad
# arguments, the helpers, the DDP equivalence in processes, AMP, Join and
# activation checkpointing over ranks, the nccl backend's test, the
# engine's unit tests (one binary), the demo, the engine's side of the cross-implementation test
# against PyTorch (cross_check), and the benchmarks it measures with
# (collectives, ddp_step, sharded_step). Their sources are the Bazel targets'
# (cmake/sources.cmake); GoogleTest and RapidCheck are found as packages
# (ci/gpu_deps.sh carries Debian's where the machine has none).
find_package(GTest REQUIRED)
find_package(rapidcheck REQUIRED)

dist_engine_sources(support_sources ${DIST_ENGINE_TEST_SUPPORT_SOURCES})
# Linked into each binary instead: the seed policy, which must run before
# main in every binary, and test_main, which ddp_equivalence (its own main)
# must not have.
foreach(file IN ITEMS testing/test_main.cc third_party/system/rapidcheck_seed.cc)
  list(REMOVE_ITEM support_sources "${CMAKE_CURRENT_SOURCE_DIR}/${file}")
endforeach()
add_library(dist_engine_test_support STATIC ${support_sources})
target_link_libraries(dist_engine_test_support PUBLIC dist_engine dist_engine_sim GTest::gtest rapidcheck)
add_library(dist_engine_rapidcheck_seed OBJECT third_party/system/rapidcheck_seed.cc)

# The suites, one binary: in a unity build their sources share translation
# units, and so the parses of LibTorch's headers. ci/gpu.sh runs each
# suite as its source's tests (SUITE_SOURCE, testing/suite_source.h), as
# the Bazel build's process runs do; ddp_equivalence has its own main.
add_executable(gpu_suites
  testing/dist/arguments_test.cc
  testing/dist/movement_property_test.cc
  testing/dist/reduction_property_test.cc
  testing/dist/helpers_test.cc
  testing/model/sharded_equivalence_property_test.cc
  testing/model/amp_test.cc
  testing/model/join_test.cc
  testing/strategy/activation_checkpointing_test.cc
  testing/test_main.cc
  $<TARGET_OBJECTS:dist_engine_rapidcheck_seed>)
target_link_libraries(gpu_suites PRIVATE dist_engine_test_support)
add_executable(ddp_equivalence testing/process/ddp_equivalence_main.cc
  $<TARGET_OBJECTS:dist_engine_rapidcheck_seed>)
target_link_libraries(ddp_equivalence PRIVATE dist_engine_test_support)

add_executable(nccl_backend_test engine/dist/backends/nccl/nccl_backend_test.cc)
target_link_libraries(nccl_backend_test PRIVATE dist_engine GTest::gtest_main)
if(DIST_ENGINE_WITH_NCCL)
  target_compile_definitions(nccl_backend_test PRIVATE ENGINE_WITH_CUDA)
endif()

# The engine's unit tests as one binary: in a unity build its sources share
# translation units, and so the parses of LibTorch's headers.
dist_engine_sources(unit_test_sources ${DIST_ENGINE_UNIT_TEST_SOURCES})
add_executable(unit_tests ${unit_test_sources} $<TARGET_OBJECTS:dist_engine_rapidcheck_seed>)
target_link_libraries(unit_tests PRIVATE dist_engine_test_support GTest::gtest_main ZLIB::ZLIB)

dist_engine_sources(demo_sources ${DIST_ENGINE_DEMO_SOURCES})
add_executable(train ${demo_sources})
target_link_libraries(train PRIVATE dist_engine dist_engine_sim ZLIB::ZLIB)

dist_engine_sources(bench_sources ${DIST_ENGINE_BENCH_SOURCES})
add_library(dist_engine_bench STATIC ${bench_sources})
target_link_libraries(dist_engine_bench PUBLIC dist_engine_test_support)
foreach(tool IN ITEMS collectives ddp_step sharded_step)
  add_executable(${tool} tools/bench/${tool}_main.cc)
  target_link_libraries(${tool} PRIVATE dist_engine_bench)
endforeach()

dist_engine_sources(cross_check_sources ${DIST_ENGINE_CROSS_CHECK_SOURCES})
add_executable(cross_check ${cross_check_sources})
target_link_libraries(cross_check PRIVATE dist_engine_bench)

dist_engine_use_pch(dist_engine_test_support gpu_suites ddp_equivalence nccl_backend_test
  unit_tests train dist_engine_bench collectives ddp_step sharded_step cross_check)
