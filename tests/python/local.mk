# rules for tests/python: the pure-Python package's pytest suite.
# AM_TESTS_ENVIRONMENT (Makefile.am) exports DLPACKSHIM_LIBRARY (the freshly
# built csrc/.libs/libdlpackshim.so), PYTHONPATH, PYTHON and top_srcdir.
TESTS += tests/python/run-pytest.sh
# fd 9 of every test is make's stderr: run-pytest.sh says there where to watch it.
AM_TESTS_FD_REDIRECT = 9>&2

# Every file of the suite (tests/python/README.md says what each folder
# tests) and of the package; packaging/test_sdist_contents.py checks that
# this list names exactly the files there are.
EXTRA_DIST += \
	tests/python/README.md \
	tests/python/run-pytest.sh \
	tests/python/conftest.py \
	tests/python/producers.py \
	tests/python/gpu_calls.py \
	tests/python/consume/test_callbacks.py \
	tests/python/consume/test_from_dlpack.py \
	tests/python/consume/test_buffer.py \
	tests/python/consume/test_exchange_api.py \
	tests/python/consume/test_cold_warm.py \
	tests/python/consume/test_one_home.py \
	tests/python/consume/test_hostile.py \
	tests/python/consume/test_memo_hostile.py \
	tests/python/consume/test_spec_errors.py \
	tests/python/consume/test_properties.py \
	tests/python/produce/test_buffer_export.py \
	tests/python/produce/test_pickle.py \
	tests/python/produce/test_pickle_hostile.py \
	tests/python/produce/test_flags_routes.py \
	tests/python/tensor/test_tensor.py \
	tests/python/tensor/test_dtype_names.py \
	tests/python/tensor/test_dtype_numpy.py \
	tests/python/tensor/test_lifetime.py \
	tests/python/tensor/test_safety.py \
	tests/python/tensor/test_stress.py \
	tests/python/pointer/test_pointer.py \
	tests/python/gpu/test_gpu_fake.py \
	tests/python/gpu/test_gpu_real.py \
	tests/python/c_api/test_ctypes_api.py \
	tests/python/c_api/test_cdef.py \
	tests/python/c_api/test_stable_abi.py \
	tests/python/c_api/gen_stable_abi.py \
	tests/python/c_api/stable_abi.txt \
	tests/python/interop/test_interop_numpy.py \
	tests/python/interop/test_interop_torch.py \
	tests/python/interop/test_interop_jax.py \
	tests/python/interop/test_transparency.py \
	tests/python/interop/test_processes.py \
	tests/python/testing/test_testing_producers.py \
	tests/python/testing/test_testing_consumer.py \
	tests/python/testing/test_check.py \
	tests/python/cli/test_cli.py \
	tests/python/cli/test_cli_checkers.py \
	tests/python/docs/test_docs.py \
	tests/python/docs/test_docs_constants.py \
	tests/python/docs/test_docs_paste.py \
	tests/python/packaging/test_install.py \
	tests/python/packaging/test_sdist_contents.py \
	tests/python/packaging/test_typing.py \
	tests/python/packaging/test_demo_setup.py \
	tests/python/packaging/test_run_pytest.py \
	tests/python/packaging/test_bench_profile.py \
	dlpackshim/__init__.py \
	dlpackshim/__main__.py \
	dlpackshim/_cdef.py \
	dlpackshim/_consume.py \
	dlpackshim/_dask.py \
	_dlpackshim_dask.py \
	dlpackshim/_demo.py \
	dlpackshim/_errors.py \
	dlpackshim/_ffi.py \
	dlpackshim/_gpu.py \
	dlpackshim/_info.py \
	dlpackshim/_pointer.py \
	dlpackshim/_tensor.py \
	dlpackshim/_types.py \
	dlpackshim/py.typed \
	dlpackshim/testing/__init__.py \
	dlpackshim/testing/capsules.py \
	dlpackshim/testing/consumer.py \
	dlpackshim/testing/interrupt.py \
	dlpackshim/testing/producer_check.py \
	dlpackshim/testing/producers.py \
	dlpackshim/testing/_lib.py \
	dlpackshim/testing/progress.py \
	dlpackshim/testing/report.py \
	dlpackshim/testing/strategies.py \
	dlpackshim/testing/targets.py \
	dlpackshim/testing/worker.py

# The suite keeps hypothesis's state in a temporary directory (conftest.py);
# a .hypothesis folder here is an older run's: remove it with the rest.
clean-local: clean-hypothesis
clean-hypothesis:
	rm -rf .hypothesis
.PHONY: clean-hypothesis
