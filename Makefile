# The two commands of the README, and the pieces they are made of.
#
# Python: the active virtual environment ($VIRTUAL_ENV) when make runs inside one, else .venv,
# created here from $(PYTHON) on first use (so a system Python that refuses `pip install`,
# "externally managed", is never installed into). PY=/path/to/python uses that interpreter as
# it is, without a venv. What was installed is recorded in stamp files that depend on the
# sources: nothing is reinstalled until a source, pyproject.toml or a requirements file changes.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
BUILD ?= build
PYTHON ?= python3
# extra arguments of `python -m venv`, e.g. --system-site-packages to reuse what the base
# Python already has (installs still go into the venv)
VENV_ARGS ?=

ifneq ($(filter command line environment,$(origin PY)),)
STAMPS = $(BUILD)/stamps/$(STAMP_ID)
NEED_PY :=
else
VENV := $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
STAMPS = $(VENV)/.llaisys-stamps/$(STAMP_ID)
NEED_PY := $(PY)
# cmake or ninja installed into the venv (when the system has none) are found first
export PATH := $(abspath $(VENV))/bin:$(PATH)
endif
PIP = $(PY) -m pip --disable-pip-version-check
# one set of stamps per (source tree, interpreter): a venv shared by two checkouts installs each
STAMP_ID := $(shell printf '%s %s' "$(CURDIR)" "$(PY)" | cksum | cut -d' ' -f1)

# What the installed package is built from: a change to any of these reinstalls it.
PKG_SOURCES := CMakeLists.txt pyproject.toml requirements-build.txt $(shell find src include python cmake web \
	-type f ! -name '*.pyc' ! -name '*.so' ! -path '*/__pycache__/*' 2> /dev/null)
NPROC := $(shell nproc 2> /dev/null || echo 2)
# where pip builds the library (kept: an edit recompiles what it touches; `make ctest` builds there too)
PKG_BUILD = $(BUILD)/pkg

.PHONY: serve test install install-test ctest nvidia-check test-asan asan-build asan-pytest pytest

# The OpenAI-compatible server and the chat page at http://127.0.0.1:8000/ (the default model
# is downloaded and verified on first use). Pass options with ARGS, e.g. make serve ARGS="--port 9000".
serve: install
	$(PY) -m llaisys.cli serve $(ARGS)

# The compile-only stages (the ASan library, then nvcc's check of the NVIDIA backend) run beside
# ctest and pytest at the lowest priority: the suite leaves part of the cores idle (its servers,
# browsers and clients wait on each other), and the builds fill that time instead of adding
# theirs. The ASan library comes first, as the ASan tests need it once pytest is done; the NVIDIA
# check goes on beside them if it has not finished, and is waited for last (in a fresh-clone run
# on a 2-core Zen 4 it finished with pytest, and the ASan build, started only then, held the ASan
# tests back 1.5 minutes). Each log is printed once its stage is waited for (whole if it failed).
BESIDE_NVIDIA = $(MAKE) --no-print-directory nvidia-check NVIDIA_BUILD=$(BUILD)/nvidia-check \
	"NVIDIA_CMAKE_ARGS=$(NVIDIA_CHECK_FLAGS)"
test: install-test
	@mkdir -p $(BUILD); rm -f $(BUILD)/asan-build.rc; \
	 ( nice -n 19 $(MAKE) --no-print-directory asan-build > $(BUILD)/asan-build.log 2>&1; \
	   echo $$? > $(BUILD)/asan-build.rc; nice -n 19 $(BESIDE_NVIDIA) > $(BUILD)/nvidia-check.log 2>&1 ) & beside=$$!; \
	 trap 'pkill -TERM -P $$beside; kill $$beside 2> /dev/null' INT TERM; \
	 show() { if [ $$2 = 0 ]; then grep -v '^\[' $(BUILD)/$$1.log; \
	          else cat $(BUILD)/$$1.log; echo "llaisys: $$1 failed (above)" >&2; fi; }; \
	 $(MAKE) --no-print-directory ctest pytest; rc=$$?; \
	 while [ ! -s $(BUILD)/asan-build.rc ] && kill -0 $$beside 2> /dev/null; do sleep 1; done; \
	 arc=$$(cat $(BUILD)/asan-build.rc 2> /dev/null || echo 1); show asan-build $$arc; \
	 if [ $$rc = 0 ] && [ $$arc = 0 ]; then $(MAKE) --no-print-directory asan-pytest; rc=$$?; else rc=1; fi; \
	 wait $$beside; nrc=$$?; show nvidia-check $$nrc; \
	 [ $$rc = 0 ] && [ $$nrc = 0 ]

install: $(STAMPS)/install

install-test: $(STAMPS)/install-test
	@command -v chromium > /dev/null || { echo "llaisys: installing Debian's chromium for the web page tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null; }

# The virtual environment. Debian and Ubuntu ship `venv` without ensurepip unless
# python3.X-venv is installed: as root with apt-get it is installed here, else make says how.
.venv/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2> /dev/null || { \
		echo "llaisys: needs Python >= 3.10; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 || echo missing)." \
		     "Name another with make PYTHON=python3.12 ..." >&2; exit 1; }
	@if ! $(PYTHON) -c 'import venv, ensurepip' 2> /dev/null; then \
		pkg=$$($(PYTHON) -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])'); \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
			echo "llaisys: $(PYTHON) cannot create a virtual environment (no ensurepip): installing Debian's $$pkg"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade $$pkg > /dev/null 2>&1 || true; \
		fi; \
		$(PYTHON) -c 'import venv, ensurepip' 2> /dev/null || { \
			echo "llaisys: $(PYTHON) cannot create a virtual environment (its venv/ensurepip module is missing)." \
			     "On Debian or Ubuntu: sudo apt-get install $$pkg; or activate a virtual environment of your own" \
			     "and run make there; or name another interpreter: make PYTHON=/path/to/python3 ..." >&2; exit 1; }; \
	fi
	@echo "llaisys: creating the virtual environment .venv (from $$($(PYTHON) -c 'import sys; print(sys.executable)'))"
	$(PYTHON) -m venv $(VENV_ARGS) .venv

# The package: build tools first (cmake and ninja from PyPI only where the system has none,
# or a cmake older than 3.20; the C++ tests below use them too), then the native build, of
# which every tenth progress line shows (all of it in $(BUILD)/install.log).
$(STAMPS)/install: $(PKG_SOURCES) | $(NEED_PY)
	@mkdir -p $(STAMPS) $(BUILD)
	@tools=""; \
	 cmake --version 2> /dev/null | awk 'NR == 1 { split($$3, v, "."); ok = v[1] > 3 || (v[1] == 3 && v[2] >= 20) } \
		END { exit !ok }' || tools="$$tools cmake"; \
	 command -v ninja > /dev/null || tools="$$tools ninja"; \
	 echo "llaisys: installing the build tools (scikit-build-core$${tools// /, }) into $$($(PY) -c 'import sys; print(sys.prefix)')"; \
	 $(PIP) install -q -r requirements-build.txt $$tools
	@command -v c++ > /dev/null || command -v g++ > /dev/null || command -v clang++ > /dev/null || { \
		echo "llaisys: no C++ compiler found: libllaisys needs a C++17 compiler with OpenMP (GCC >= 10 or Clang >= 11;" \
		     "on Debian or Ubuntu: sudo apt-get install g++)" >&2; exit 1; }
	@echo "llaisys: building libllaisys (C++17 + OpenMP: about $$(( (8 + $(NPROC) - 1) / $(NPROC) )) min on $(NPROC) cores" \
	      "the first time, seconds after an edit) and installing the package; full log: $(BUILD)/install.log"
	@$(PIP) install -v --no-build-isolation -C build-dir=$(PKG_BUILD) . 2>&1 | tee $(BUILD)/install.log | awk ' \
		match($$0, /\[ *[0-9]+\/[0-9]+\]/) { split(substr($$0, RSTART + 1, RLENGTH - 2), n, "/"); \
			d = int(10 * n[1] / n[2]); if (d > last || n[1] == n[2]) { last = d; \
			sub(/^ +/, ""); printf "  %3d%% %s\n", 100 * n[1] / n[2], substr($$0, 1, 110); fflush() } } \
		/Successfully installed/ { k = split($$0, w, " ") - 3; \
			print "  installed llaisys" (k > 0 ? " and " k " dependencies" : ""); fflush() }' || { \
		tail -n 40 $(BUILD)/install.log; echo "llaisys: install failed; the full log is $(BUILD)/install.log" >&2; exit 1; }
	@touch $@

# test references (torch, transformers, llama.cpp is not among them), the openai client, and
# Debian's chromium for the web page tests (playwright drives it; it never downloads a browser).
# pip byte-compiles what it installs: where PYTHONDONTWRITEBYTECODE is set, as on these machines,
# a module left uncompiled (--no-compile) is compiled from source by every process importing it.
$(STAMPS)/install-test: requirements-test.txt | $(STAMPS)/install
	@echo "llaisys: installing the test requirements (torch==2.13.0, transformers, ...: 1.3 GB, a few minutes the first time)"
	$(PIP) install -q -r requirements-test.txt
	@touch $@

# PYTEST_ARGS narrows the run, e.g. make pytest PYTEST_ARGS="test/core -x". The suite runs in
# PYTEST_WORKERS processes (pytest-xdist; 0 runs it in this one), a test file at a time each, so
# a module's server or reference is built once: alone the suite keeps ~1 of 2 cores busy (its
# servers, browsers and clients wait on each other), two workers keep both.
PYTEST_WORKERS ?= $(shell n=$(NPROC); echo $$(( n < 4 ? n : 4 )))
# Files in collection order, the longest first (test/conftest.py, LONGEST_FIRST), not xdist's most-tests-first.
XDIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The suite's processes, unless the caller chose otherwise:
# - idle OpenMP threads sleep at once (OMP_WAIT_POLICY=passive). The workers' libraries and torch
#   run their teams side by side on the same cores, where a spinning thread only takes a core from
#   the other worker. Alternated twice each on a 2-core Zen 4 (2026-12-01), the ops, core, parity,
#   sampling and engine tests ran 3-5% faster so (183 / 203 s against 188 / 215), and the ASan
#   stage 4-8% (246 / 266 s against 267 / 276). test_cli and test_threads check the policy llaisys
#   chooses itself with these variables removed.
# - bytecode is written (where PYTHONDONTWRITEBYTECODE is set, as on these machines): pytest keeps
#   its assertion-rewritten test modules only as .pyc files, and without them every worker and child
#   pytest rewrote all of them again (~5 CPU-seconds a worker).
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive}
pytest: install-test
	$(TEST_ENV) $(PY) -m pytest -q --durations=15 $(XDIST) $(PYTEST_ARGS)

# The C programs that use libllaisys through the public headers alone, built in the package's
# own build directory against the library pip built there (compiled once, not twice): the
# reconfigure only adds the test targets, whose objects are all that is compiled.
ctest: install
	cmake -S . -B $(PKG_BUILD) -DLLAISYS_BUILD_TESTS=ON > /dev/null
	cmake --build $(PKG_BUILD)
	ctest --test-dir $(PKG_BUILD) --output-on-failure

# With nvcc present, the NVIDIA backend must compile and link (nothing here runs it).
# `make test` checks it in a build of its own without optimization: host C++ at -O0 (the same
# sources at -O3 are the package's build; 183 of the check's 560 CPU-seconds were those files)
# and device code through cicc and ptxas at -O0. Every kernel still goes through the front end
# for both archs, to PTX, and through ptxas (inline PTX, shared-memory and launch-bound checks)
# under --Werror, in 162 CPU-seconds instead of 280 (the paged attention file alone 22 s instead
# of 73 on a Zen 4 core, 2026-11-30). build/nvidia stays the release build users run.
NVIDIA_BUILD = $(BUILD)/nvidia
NVIDIA_CMAKE_ARGS =
NVIDIA_CHECK_FLAGS = -DCMAKE_CXX_FLAGS_RELEASE='-O0 -DNDEBUG' -DCMAKE_CUDA_FLAGS_RELEASE='-O0 -Xptxas=-O0 -Xcicc=-O0 -DNDEBUG'
nvidia-check:
	@if command -v nvcc > /dev/null; then \
		cmake -S . -B $(NVIDIA_BUILD) -G Ninja -DLLAISYS_NVIDIA=ON -DLLAISYS_BUILD_TESTS=OFF $(NVIDIA_CMAKE_ARGS) > /dev/null && \
		cmake --build $(NVIDIA_BUILD) && echo "nvidia backend: compiled and linked"; \
	else echo "nvidia backend: nvcc not found, compile check skipped"; fi

# ASan + UBSan build of the library, loaded into Python through LLAISYS_LIBRARY, at -O1 with
# line tables (-g1), as ASan's own docs advise: it compiles in about half the time of -O2 -g
# (the heaviest kernel file 11 s against 32 s), and its tests ran 8% longer on a slice of them
# (217 s against 201 s), while reports still name every file and line.
# python does not link libstdc++, so it is preloaded beside libasan: ASan can then intercept
# __cxa_throw (else the first C++ exception aborts). allocator_may_return_null lets the
# out-of-memory tests see a NULL from the allocator, as they do without ASan. --capture=sys
# leaves file descriptor 2 alone, so a sanitizer report is printed instead of dying with
# pytest's captured output. Beyond ops and core it runs everything that drives the model, the
# KV cache and the sampler through the library on tiny checkpoints (test/parity, test/sampling,
# the loader tests of test/models); `-m "not slow"` leaves out the real 0.5B model, too slow
# under ASan. Child processes that tests start (test_handle_misuse) inherit the preload.
ASAN_TESTS = test/ops test/core test/parity test/sampling test/models/test_model_loader.py \
	test/models/test_gguf_convert_tiny.py test/models/test_moe_registry.py
test-asan: asan-build asan-pytest
asan-build: install
	cmake -S . -B $(BUILD)/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
		-DLLAISYS_SANITIZE=ON -DLLAISYS_BUILD_TESTS=OFF > /dev/null
	cmake --build $(BUILD)/asan
asan-pytest: install-test
	$(TEST_ENV) LLAISYS_LIBRARY=$(CURDIR)/$(BUILD)/asan/libllaisys.so LLAISYS_TEST_SANITIZED=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(PY) -m pytest -q -p no:cacheprovider --capture=sys -m "not slow" $(XDIST) $(ASAN_TESTS)
