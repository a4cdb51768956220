"""The top-level namespace is the product API; the lessons' names live in gptcore.lessons.

A lesson's name asked of ``gptcore`` raises an AttributeError whose message says where the
name lives now (``gptcore.__getattr__``); every name the top level promises (``__all__``) is
there.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import gptcore
import gptcore.lessons

# The lesson names that were top-level before the top level became the product API.
FORMERLY_TOP_LEVEL = [
    "LESSON14_IDS_1BASED",
    "RustlabRng",
    "lesson13_block",
    "lesson14_config",
    "lesson14_counting",
    "lesson14_weights",
    "textbook_block",
    "textbook_forward",
    "to_zero_based",
]

# The product API as it was before the lessons left: every name is still there.
PRODUCT = [
    "ChinchillaBudget", "FlopCount", "GPTConfig", "LogitsMemory", "Model", "PRESETS", "PackedMatrix",
    "ParamCount", "Tokenizer", "available_kernels", "chinchilla", "expected_shapes", "flops_per_token",
    "forward", "from_half_bits", "get_num_threads", "infer_config", "init_weights", "kernel", "load",
    "load_safetensors", "logits_memory", "matmul", "matmul_reference", "param_count", "round_weights",
    "save_safetensors", "set_kernel", "set_num_threads", "softmax", "to_half_bits", "validate",
]


def test_the_product_api_is_all_there():
    assert sorted(gptcore.__all__) == sorted(PRODUCT)
    for name in gptcore.__all__:
        assert getattr(gptcore, name) is not None, name


@pytest.mark.parametrize("name", sorted(set(FORMERLY_TOP_LEVEL) | set(gptcore.lessons.__all__)))
def test_a_lesson_name_is_not_top_level_and_says_where_it_lives(name):
    assert name not in gptcore.__all__
    assert name not in dir(gptcore)
    assert not hasattr(gptcore, name)
    with pytest.raises(AttributeError) as info:
        getattr(gptcore, name)
    assert f"gptcore.lessons.{name}" in str(info.value)
    assert getattr(gptcore.lessons, name) is not None


def test_the_former_top_level_names_import_from_lessons():
    assert set(FORMERLY_TOP_LEVEL) <= set(gptcore.lessons.__all__)
    code = f"from gptcore.lessons import {', '.join(FORMERLY_TOP_LEVEL)}; print('imported')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr


def test_lesson14_counting_is_the_accounting_function():
    from gptcore.accounting import lesson14_counting

    assert gptcore.lessons.lesson14_counting is lesson14_counting


def test_other_missing_names_are_plain_attribute_errors():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'$"):
        gptcore.no_such_name  # noqa: B018


def test_the_lessons_module_is_an_attribute_of_the_package():
    code = "import gptcore; print(gptcore.lessons.textbook_forward.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "textbook_forward", out.stderr
