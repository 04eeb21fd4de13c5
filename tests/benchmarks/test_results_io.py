"""results_io.describe_cpu: a results file tells two CPUs with the same bare model name apart."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

from results_io import describe_cpu  # noqa: E402

MILAN = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx fma avx2 bmi2

processor\t: 1
model name\t: something else
"""


def test_names_family_model_and_the_widest_vector_extension():
    assert describe_cpu(MILAN) == "AMD EPYC (family 25 model 1 stepping 1, avx2)"
    genoa = MILAN.replace("model\t\t: 1", "model\t\t: 17").replace("avx2 bmi2", "avx2 avx512f avx512bw")
    assert describe_cpu(genoa) == "AMD EPYC (family 25 model 17 stepping 1, avx512f)"


def test_a_bare_cpuinfo_keeps_the_model_name():
    assert describe_cpu("model name\t: Some CPU\n") == "Some CPU"
