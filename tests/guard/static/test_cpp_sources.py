"""C++ sources in string constants: a finding names the line of the candidate file where the code stands."""

from kfoundry.guard import check_source
from tests.guard.static.helpers import assert_fires, marked_line, src


def test_cpp_system_lines_follow_escapes_line_continuations_and_concatenation():
    # the value's "\n" escapes are no lines of the file: every finding is on the literal's own line
    source = src('CPP = "#include <torch/extension.h>\\nint f() {\\n  return system(\\"id\\"); }\\n"  # <-')
    assert_fires(source, "cpp-system")
    assert [f.line for f in check_source(source) if f.rule == "cpp-system"] == [marked_line(source)]
    source = src('''
        CPP = ("#include <torch/extension.h>\\n" "int f() {"
               " return 0; }\\n"
               "int g() {\\n return system(\\"id\\"); }\\n")  # <-
    ''')
    assert_fires(source, "cpp-system")
    source = src('''
        CPP = "#include <torch/extension.h>\\n\\
        int f() { return 0; }\\n\\
        int g() { return fork(); }\\n"  # <-
    ''')
    assert_fires(source, "cpp-system")
