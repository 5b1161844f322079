"""More oracle scenarios for customops against the real Triton core (the machinery is tests/test_triton_core.py's).

Summary: 59 scenarios; customops agrees with the core on 56; 3 are xfail (the XFAIL table below, one reason each):
an example backend's own checks of its config (reshape, shapes), and a model without config.pbtxt whose backend
does not fill in its configuration.

Each scenario is named after the core rule it shows: the seed walkthrough's custom C++ backend (the example
"recommended" backend renamed libtriton_cumtchw.so, as the walkthrough builds it) laid out as written and in its
variants; the order in which AutoCompleteBackendFields (core src/model_config_utils.cc) picks a backend from the
model's first subdirectory; the runtime field as GetBackendLibraryProperties (src/backend_model.cc) resolves it,
symlinks and Python-based backends included; and the version and config rules that decide whether a model is
served. A scenario where customops disagrees with the core today is xfail(strict) with the reason (XFAIL below).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_triton_core import BACKENDS, DIR, IO, MINIMAL, MYBACKEND, Lib, Link, Scenario, check, model, s

SEED = ('name: "cumtchw"\nbackend: "cumtchw"\n\ndynamic_batching {\n  max_queue_delay_microseconds: 5000000\n}\n'
        'input [\n  {\n    name: "IN0"\n    data_type: TYPE_INT32\n    dims: [ 4 ]\n  }\n]\n'
        'output [\n  {\n    name: "OUT0"\n    data_type: TYPE_INT32\n    dims: [ 4 ]\n  }\n]\n'
        'instance_group [\n  {\n    kind: KIND_CPU\n  }\n]\n')
CUMTCHW = Lib("recommended")
PYTHON = {f"{BACKENDS}/python/libtriton_python.so": Lib()}
MYPY = {f"{BACKENDS}/mypy/model.py": "class TritonPythonModel: pass\n"}


def seed(config: str | None = SEED, versions: tuple[str, ...] = ("1",), **extra: object) -> dict[str, object]:
    """The walkthrough's models/cumtchw: `extra` maps a path under it (`__` for `/`) to its content."""
    return dict(model("cumtchw", config=config, versions=versions,
                      extra={k.replace("__", "/"): v for k, v in extra.items()}))


def framework(name: str) -> dict[str, object]:
    """A framework's backend directory holding its library (the minimal example, renamed)."""
    return {f"{BACKENDS}/{name}/libtriton_{name}.so": Lib()}


def rt(runtime: str, backend: str = MINIMAL) -> str:
    return f'{backend}runtime: "{runtime}"\n'


SCENARIOS = [
    # the seed walkthrough: models/cumtchw/{1/,libtriton_cumtchw.so,config.pbtxt}
    ("seed_walkthrough_library_in_model_directory", s(seed(**{"libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_library_in_backend_directory",
     s(seed(), {f"{BACKENDS}/cumtchw/libtriton_cumtchw.so": CUMTCHW})),
    ("seed_walkthrough_library_in_version_directory", s(seed(**{"1__libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_library_keeps_the_example_name",
     s(seed(**{"libtriton_recommended.so": CUMTCHW}), {f"{BACKENDS}/recommended/libtriton_recommended.so": CUMTCHW})),
    ("seed_walkthrough_backend_named_after_the_example",
     s(seed(SEED.replace('backend: "cumtchw"', 'backend: "recommended"'), **{"libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_empty_config", s(seed("", **{"libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_no_version_directory", s(seed(versions=(), **{"libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_reshape_rejected_by_the_backend",
     s(seed(SEED.replace("dims: [ 4 ]\n  }\n]\noutput", "dims: [ 4 ]\n    reshape: { shape: [ 2, 2 ] }\n  }\n]\n"
                         "output"), **{"libtriton_cumtchw.so": CUMTCHW}))),
    ("seed_walkthrough_minimal_example_renamed", s(seed(**{"libtriton_cumtchw.so": Lib("minimal")}))),
    # AutoCompleteBackendFields: the first subdirectory, frameworks in a fixed order
    ("autocomplete_plan_before_onnx",
     s(model(config="", extra={"1/model.plan": "", "1/model.onnx": ""}), framework("tensorrt"))),
    ("autocomplete_onnx_when_plan_is_a_directory",
     s(model(config="", extra={"1/model.plan/": DIR, "1/model.onnx": ""}), framework("onnxruntime"))),
    ("autocomplete_graphdef_file_before_savedmodel_directory",
     s(model(config="", extra={"1/model.savedmodel/": DIR, "1/model.graphdef": ""}), framework("tensorflow"))),
    ("autocomplete_first_subdirectory_10_before_2",
     s(model(config="", versions=("10", "2"), extra={"10/model.plan": "", "2/model.onnx": ""}),
       framework("tensorrt"))),
    ("autocomplete_looks_only_into_the_first_subdirectory",
     s(model(config="", versions=("1", "2"), extra={"2/model.onnx": ""}), framework("onnxruntime"))),
    ("autocomplete_hidden_directory_sorts_before_versions",
     s(model(config="", extra={".ipynb_checkpoints/": DIR, "1/model.onnx": ""}), framework("onnxruntime"))),
    ("autocomplete_configs_directory_sorts_after_versions",
     s(model(config="", extra={"configs/": DIR, "warmup/": DIR, "1/model.onnx": ""}), framework("onnxruntime"))),
    ("autocomplete_custom_backend_from_model_name", s(model("m.mybackend", config=""), MYBACKEND)),
    ("no_config_file_backend_must_complete_the_config", s(model("m.mybackend", config=None), MYBACKEND)),
    ("autocomplete_custom_backend_after_the_first_dot",
     s(model("m.my.backend", config=""), {f"{BACKENDS}/my.backend/libtriton_my.backend.so": Lib()})),
    ("autocomplete_custom_backend_not_taken_when_default_model_filename_given",
     s(model("m.mybackend", config='default_model_filename: "model.bin"\n'), MYBACKEND)),
    ("autocomplete_custom_backend_not_taken_when_platform_given",
     s(model("m.mybackend", config='platform: "custom"\n'), MYBACKEND)),
    ("autocomplete_model_py_is_python", s(model(config="", extra={"1/model.py": ""}), PYTHON)),
    ("autocomplete_model_xml_is_openvino", s(model(config="", extra={"1/model.xml": ""}), framework("openvino"))),
    ("autocomplete_model_pt_before_model_pt2",
     s(model(config="", extra={"1/model.pt": "", "1/model.pt2": ""}), framework("pytorch"))),
    ("autocomplete_model_pt2_is_pytorch_torch_aoti",
     s(model(config="", extra={"1/model.pt2": ""}), framework("pytorch"))),
    ("autocomplete_model_pt_directory_decides_nothing",
     s(model(config="", extra={"1/model.pt/": DIR}), framework("pytorch"))),
    ("autocomplete_onnx_before_python", s(model(config="", extra={"1/model.py": "", "1/model.onnx": ""}),
                                          framework("onnxruntime"))),
    ("platform_libtorch_alias", s(model(config='platform: "libtorch"\n'), framework("pytorch"))),
    ("platform_torch_aoti", s(model(config='platform: "torch_aoti"\n'), framework("pytorch"))),
    ("backend_pytorch_with_platform_torch_aoti",
     s(model(config='backend: "pytorch"\nplatform: "torch_aoti"\n'), framework("pytorch"))),
    ("backend_pytorch_with_platform_pytorch_libtorch",
     s(model(config='backend: "pytorch"\nplatform: "pytorch_libtorch"\n'), framework("pytorch"))),
    ("unknown_platform_with_unknown_backend_accepted", s(model(config='platform: "custom"\n' + MINIMAL), MYBACKEND)),
    ("unknown_platform_without_backend", s(model(config='platform: "custom"\n'), MYBACKEND)),
    ("ensemble_platform_with_a_backend", s(model(config='platform: "ensemble"\n' + MINIMAL), MYBACKEND)),
    ("platform_torch_aoti_without_backend_directory", s(model(config='platform: "torch_aoti"\n'), MYBACKEND)),
    # the runtime field: GetBackendLibraryProperties
    ("runtime_relative_symlink_escaping_the_version_directory",
     s(model(config=rt("lib/libother.so"), extra={"1/lib": Link("../lib"), "lib/libother.so": Lib()}))),
    ("runtime_absolute_symlink_escaping_the_version_directory",
     s(model(config=rt("libother.so"), extra={"1/libother.so": Link("/models/m/real/libother.so"),
                                              "real/libother.so": Lib()}))),
    ("runtime_absolute_symlink_staying_in_the_backend_directory",
     s(model(config=rt("libother.so")), {f"{BACKENDS}/mybackend/libother.so": Link(f"/{BACKENDS}/mybackend/real.so"),
                                         f"{BACKENDS}/mybackend/real.so": Lib()})),
    ("default_library_symlink_escape_not_checked_without_runtime",
     s(model(extra={"1/libtriton_mybackend.so": Link("../real/libtriton_mybackend.so"),
                    "real/libtriton_mybackend.so": Lib()}))),
    ("runtime_in_a_subdirectory_of_the_backend_directory",
     s(model(config=rt("sub/libother.so")), {f"{BACKENDS}/mybackend/sub/libother.so": Lib()})),
    ("runtime_escaping_and_missing_is_not_found", s(model(config=rt("../libnope.so")), MYBACKEND)),
    ("runtime_naming_a_text_file", s(model(config=rt("README.txt")), MYBACKEND,
                                     {f"{BACKENDS}/mybackend/README.txt": "not a library\n"})),
    ("runtime_model_py_python_based_backend", s(model(config=rt("model.py", 'backend: "mypy"\n')), MYPY, PYTHON)),
    ("runtime_model_py_python_library_in_model_directory",
     s(model(config=rt("model.py", 'backend: "mypy"\n'), extra={"libtriton_python.so": Lib()}), MYPY)),
    ("runtime_model_py_without_python_library", s(model(config=rt("model.py", 'backend: "mypy"\n')), MYPY)),
    ("runtime_model_py_without_model_py_in_backend_directory",
     s(model(config=rt("model.py", 'backend: "mypy"\n')), PYTHON)),
    ("python_based_backend_library_in_backend_directory_wins_over_model_py",
     s(model(config='backend: "mypy"\n'), MYPY, {f"{BACKENDS}/mypy/libtriton_mypy.so": Lib()})),
    # versions and configs
    ("version_policy_specific_negative_version",
     s(model(config=MINIMAL + "version_policy: { specific: { versions: [-1] } }\n", versions=("-1", "1")),
       MYBACKEND)),
    ("version_policy_latest_picks_over_negative", s(model(versions=("-1", "-2")), MYBACKEND)),
    ("model_config_name_configs_file_with_syntax_error",
     s(model(extra={"configs/prod.pbtxt": 'backend: "mybackend"\nmax_batch_size: [\n'}), MYBACKEND,
       args=("--model-config-name=prod",))),
    ("config_name_empty_string_takes_the_directory_name", s(model(config='name: ""\n' + MINIMAL), MYBACKEND)),
    ("max_batch_size_negative", s(model(config=MINIMAL + "max_batch_size: -1\n"), MYBACKEND)),
    ("dynamic_batching_preferred_size_above_max_batch_size",
     s(model(config=MINIMAL + "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }\n"), MYBACKEND)),
    ("input_without_dims_for_the_recommended_backend",
     s(model(config=MINIMAL + IO.replace("dims: [ 4 ] } ]\noutput", "dims: [ ] } ]\noutput")),
       {f"{BACKENDS}/mybackend/libtriton_mybackend.so": Lib("recommended")})),
    ("dynamic_batching_default_priority_level_out_of_range",
     s(model(config=MINIMAL + "dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n"), MYBACKEND)),
    ("input_without_data_type",
     s(model(config=MINIMAL + 'input [ { name: "IN0" dims: [ 4 ] } ]\n'), MYBACKEND)),
    ("input_and_output_with_the_same_name_accepted",
     s(model(config=MINIMAL + IO.replace("OUT0", "IN0")), MYBACKEND)),
    ("version_policy_latest_num_versions_negative",
     s(model(config=MINIMAL + "version_policy: { latest: { num_versions: -1 } }\n"), MYBACKEND)),
    ("version_policy_specific_empty",
     s(model(config=MINIMAL + "version_policy: { specific: { } }\n"), MYBACKEND)),
]

XFAIL: dict[str, str] = {  # what customops does wrong today, per scenario
    "seed_walkthrough_reshape_rejected_by_the_backend":
        "the example backend's own config check (at model initialisation) rejects an input with reshape; "
        "customops does not model a backend's config checks; the core: 'Unsupported: reshape not "
        "supported for input tensor'",
    "input_without_dims_for_the_recommended_backend":
        "the example backend's own check of its I/O shapes is not modelled; the core: 'expected input and output "
        "shape to match, got [] and [4]'",
    "no_config_file_backend_must_complete_the_config":
        "with no config.pbtxt the backend must set the configuration (TRITONBACKEND_ModelSetConfig) or Model::Init "
        "fails; customops assumes every backend completes it; the core: \"model configuration is not provided for "
        "model 'm.mybackend'\"",
}


def _marks(name: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []


@pytest.mark.parametrize("scenario", [pytest.param(sc, id=name, marks=_marks(name)) for name, sc in SCENARIOS])
def test_customops_agrees_with_the_triton_core(tmp_path: Path, scenario: Scenario) -> None:
    check(tmp_path, scenario)


def test_scenario_names_are_unique_and_cover_the_corpus() -> None:
    names = [name for name, _ in SCENARIOS]
    assert len(names) == len(set(names)) and set(XFAIL) <= set(names)
