# The two commands of the README, and the pieces they are made of.
PY ?= python3
PIP = $(PY) -m pip
BUILD ?= build

.PHONY: serve test install install-test ctest nvidia-check test-asan pytest

# The OpenAI-compatible server and the chat page at http://127.0.0.1:8000/ (the default model
# is downloaded and verified on first use). Pass options with ARGS, e.g. make serve ARGS="--port 9000".
serve: install
	$(PY) -m llaisys.cli serve $(ARGS)

test: install-test ctest nvidia-check pytest test-asan

install:
	$(PIP) install -q -r requirements-build.txt
	$(PIP) install -q --no-build-isolation .

# test references (torch, transformers, llama.cpp is not among them), the openai client, and
# Debian's chromium for the web page tests (playwright drives it; it never downloads a browser).
install-test: install
	$(PIP) install -q -r requirements-test.txt
	command -v chromium > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null; }

pytest:
	$(PY) -m pytest -q

# The C program that uses libllaisys through the public headers alone.
ctest:
	cmake -S . -B $(BUILD)/ctest -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(BUILD)/ctest
	ctest --test-dir $(BUILD)/ctest --output-on-failure

# With nvcc present, the NVIDIA backend must compile and link (nothing here runs it).
nvidia-check:
	@if command -v nvcc > /dev/null; then \
		cmake -S . -B $(BUILD)/nvidia -G Ninja -DLLAISYS_NVIDIA=ON -DLLAISYS_BUILD_TESTS=OFF > /dev/null && \
		cmake --build $(BUILD)/nvidia && echo "nvidia backend: compiled and linked"; \
	else echo "nvidia backend: nvcc not found, compile check skipped"; fi

# ASan + UBSan build of the library, loaded into Python through LLAISYS_LIBRARY.
# python does not link libstdc++, so it is preloaded beside libasan: ASan can then intercept
# __cxa_throw (else the first C++ exception aborts). allocator_may_return_null lets the
# out-of-memory tests see a NULL from the allocator, as they do without ASan. --capture=sys
# leaves file descriptor 2 alone, so a sanitizer report is printed instead of dying with
# pytest's captured output. Beyond ops and core it runs everything that drives the model, the
# KV cache and the sampler through the library on tiny checkpoints (test/parity, test/sampling,
# the loader tests of test/models); `-m "not slow"` leaves out the real 0.5B model, too slow
# under ASan. Child processes that tests start (test_handle_misuse) inherit the preload.
ASAN_TESTS = test/ops test/core test/parity test/sampling test/models/test_model_loader.py \
	test/models/test_gguf_convert_tiny.py
test-asan:
	cmake -S . -B $(BUILD)/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLAISYS_SANITIZE=ON -DLLAISYS_BUILD_TESTS=OFF > /dev/null
	cmake --build $(BUILD)/asan
	LLAISYS_LIBRARY=$(CURDIR)/$(BUILD)/asan/libllaisys.so \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(PY) -m pytest -q -p no:cacheprovider --capture=sys -m "not slow" $(ASAN_TESTS)
