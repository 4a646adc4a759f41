"""kernel_forge/model/kernel_heads.py: where kernel heads stand in comment-free CUDA source."""
from __future__ import annotations

import pytest

from kernel_forge.common.errors import SignatureError
from kernel_forge.model.kernel_heads import closing_paren, kernel_name, templated_heads


@pytest.mark.parametrize("text, name", [
    ("__global__ void k(float* x)", "k"),
    ('extern "C" __global__ void __launch_bounds__(256, 2) k2(int n)', "k2"),
    ("__global__ void __launch_bounds__((BX * BY), MINB)\nk3(int n)", "k3"),
    ("__global__ void C10_LAUNCH_BOUNDS_1(256) k4(int n)", "k4"),       # PyTorch's macro, an attribute
    ("__global__ void C10_LAUNCH_BOUNDS_0 k5(int n)", "k5"),
    ("__global__ std::enable_if_t<(w > 0)> k6(int n)", None),             # not void: not a head this finds
])
def test_the_kernel_name_is_read_past_attributes(text, name):
    assert kernel_name(text) == name


def test_templated_heads_are_found_with_their_template_and_their_parentheses():
    code = ("template <typename T, int N = 4>\n__global__ void a(T* y, int n);\n"
            "__global__ void b(float* y) {}\n"
            "template <typename T, int N>\n__global__ void __launch_bounds__(N) a(T* y, int n) { }\n"
            "template <>\n__global__ void a(float* y, int n) { }\n")
    heads = templated_heads(code)
    assert [(h.name, h.template) for h in heads] == [("a", "template <typename T, int N = 4>"),
                                                     ("a", "template <typename T, int N>"), ("a", "template <>")]
    for h in heads:
        assert code[h.open_paren] == "(" and code[closing_paren(code, h.open_paren)] == ")"
        assert code[h.start:].startswith("__global__")


def test_an_unclosed_parameter_list_is_a_signature_error():
    with pytest.raises(SignatureError, match="unclosed parameter list"):
        closing_paren("__global__ void k(int n", 17)


def test_a_position_inside_a_define_over_continued_lines_is_in_a_directive():
    from kernel_forge.model.kernel_heads import in_directive

    code = "int a;\n#define K(N) \\\n  __global__ void N(int n) \\\n  { }\n__global__ void k(int n) {}\n"
    assert in_directive(code, code.index("__global__ void N"))
    assert in_directive(code, code.index("{ }"))
    assert not in_directive(code, code.index("__global__ void k")) and not in_directive(code, 0)
