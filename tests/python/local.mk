# rules for tests/python: the pure-Python package's pytest suite.
# AM_TESTS_ENVIRONMENT (Makefile.am) exports DLPACKSHIM_LIBRARY (the freshly
# built csrc/.libs/libdlpackshim.so), PYTHONPATH, PYTHON and top_srcdir.
TESTS += tests/python/run-pytest.sh
# fd 9 of every test is make's stderr: run-pytest.sh says there where to watch it.
AM_TESTS_FD_REDIRECT = 9>&2

EXTRA_DIST += \
	tests/python/run-pytest.sh \
	tests/python/conftest.py \
	tests/python/producers.py \
	tests/python/test_bench_profile.py \
	tests/python/test_buffer.py \
	tests/python/test_check.py \
	tests/python/test_cold_warm.py \
	tests/python/test_demo_setup.py \
	tests/python/test_cli.py \
	tests/python/test_cli_checkers.py \
	tests/python/test_docs.py \
	tests/python/test_docs_constants.py \
	tests/python/test_docs_paste.py \
	tests/python/test_dtype_names.py \
	tests/python/test_dtype_numpy.py \
	tests/python/test_ctypes_api.py \
	tests/python/test_exchange_api.py \
	tests/python/test_from_dlpack.py \
	tests/python/test_gpu_fake.py \
	tests/python/test_gpu_real.py \
	tests/python/test_hostile.py \
	tests/python/test_install.py \
	tests/python/test_interop_jax.py \
	tests/python/test_interop_numpy.py \
	tests/python/test_interop_torch.py \
	tests/python/test_lifetime.py \
	tests/python/test_one_home.py \
	tests/python/test_pointer.py \
	tests/python/test_properties.py \
	tests/python/test_run_pytest.py \
	tests/python/test_sdist_contents.py \
	tests/python/test_spec_errors.py \
	tests/python/test_stable_abi.py \
	tests/python/gen_stable_abi.py \
	tests/python/stable_abi.txt \
	tests/python/test_stress.py \
	tests/python/test_safety.py \
	tests/python/test_cdef.py \
	tests/python/test_tensor.py \
	tests/python/test_transparency.py \
	tests/python/test_typing.py \
	tests/python/test_testing_consumer.py \
	tests/python/test_testing_producers.py \
	dlpackshim/__init__.py \
	dlpackshim/__main__.py \
	dlpackshim/_consume.py \
	dlpackshim/_demo.py \
	dlpackshim/_errors.py \
	dlpackshim/_ffi.py \
	dlpackshim/_cdef.py \
	dlpackshim/_gpu.py \
	dlpackshim/_info.py \
	dlpackshim/_pointer.py \
	dlpackshim/_tensor.py \
	dlpackshim/_types.py \
	dlpackshim/testing/__init__.py \
	dlpackshim/testing/capsules.py \
	dlpackshim/testing/consumer.py \
	dlpackshim/testing/interrupt.py \
	dlpackshim/testing/producer_check.py \
	dlpackshim/testing/producers.py \
	dlpackshim/testing/progress.py \
	dlpackshim/testing/report.py \
	dlpackshim/testing/strategies.py \
	dlpackshim/testing/targets.py \
	dlpackshim/testing/worker.py \
	dlpackshim/py.typed

# The suite keeps hypothesis's state in a temporary directory (conftest.py);
# a .hypothesis folder here is an older run's: remove it with the rest.
clean-local: clean-hypothesis
clean-hypothesis:
	rm -rf .hypothesis
.PHONY: clean-hypothesis
