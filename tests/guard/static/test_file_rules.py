"""file-read: reading files, folders, devices and standard input from host code, and what does not count."""

import pytest

from kfoundry.guard.findings import RULES
from tests.guard.static.helpers import assert_clean, assert_fires, model, src


# -- file-read ------------------------------------------------------------------------------------

FILE_READ_CHEATS = [
    'data = open("table.txt").read()  # <-',
    'data = open("table.bin", "rb").read()  # <-',
    'data = open("table.txt", mode="r").read()  # <-',
    'def load(p, mode):\n    return open(p, mode)  # <-',
    'import io\ndata = io.open("table.txt").read()  # <-',
    'f = os.fdopen(3)  # <-',
    'fd = os.open("table.txt", os.O_RDONLY)  # <-',
    'chunk = os.read(0, 10)  # <-',
    'names = os.listdir(".")  # <-',
    'entries = list(os.scandir("."))  # <-',
    'tree = list(os.walk("."))  # <-',
    'info = os.stat("table.txt")  # <-',
    'import glob\nfiles = glob.glob("*.pt")  # <-',
    'import glob\nfiles = list(glob.iglob("*.pt"))  # <-',
    'from pathlib import Path\ntext = Path("table.txt").read_text()  # <-',
    'import pathlib\nraw = pathlib.Path("table.bin").read_bytes()  # <-',
    'from pathlib import Path\nwith Path("table.txt").open() as f:  # <-\n    pass',
    'from pathlib import Path\nwith (Path("cache") / "t.txt").open("rb") as f:  # <-\n    pass',
    'from pathlib import Path\nkids = list(Path(".").iterdir())  # <-',
    'from pathlib import Path\npts = list(Path(".").glob("*.pt"))  # <-',
    'from pathlib import Path\npts = list(Path(".").rglob("*.pt"))  # <-',
    'def scan(folder):\n    return folder.read_bytes()  # <-',
    'def scan(folder):\n    return list(folder.glob("*"))  # <-',
    'import numpy as np\na = np.fromfile("a.bin")  # <-',
    'import numpy as np\na = np.load("a.npy")  # <-',
    'import numpy\na = numpy.memmap("a.bin", mode="r")  # <-',
    'w = torch.load("w.pt")  # <-',
    't = torch.from_file("t.bin", size=4)  # <-',
    't = torch.UntypedStorage.from_file("t.bin", False, 4)  # <-',
    'import mmap\nm = mmap.mmap(3, 4096)  # <-',
    'import linecache\nline = linecache.getline("kernel.py", 1)  # <-',
    'import shutil\nshutil.copyfile("a", "b")  # <-',
    'import shutil\nshutil.move("a", "b")  # <-',
    'from os import listdir\nnames = listdir(".")  # <-',
    'def peek():\n    o = os\n    return o.listdir(".")  # <-',
    'import posix\nnames = posix.listdir(".")  # <-',
    'import sys\nline = sys.stdin.readline()  # <-',
    'answer = input()  # <-',
    'files = list(map(open, ["a", "b"]))  # <-',
    'from pathlib import Path\nread = getattr(Path("t"), "read_text")  # <-',
    'entries = getattr(os, "listdir")(".")  # <-',
    'METHOD = "read_bytes"  # <-',
    'PROC = "/proc/self/environ"  # <-',
    'path = f"/proc/{os.getppid()}/environ"  # <-',
    'path = os.path.join("/proc", str(os.getppid()), "environ")  # <-',
    'SYS = "/sys/class/net"  # <-',
    'DEV = "/dev/nvidia0"  # <-',
    'ETC = "/etc/passwd"  # <-',
    'SNEAKY = "//proc/./self/status"  # <-',
    'URL = "file:///etc/hosts"  # <-',
    'RAW = b"/proc/self/environ"  # <-',
    'from torch.utils.cpp_extension import load\n_ext = load(name="e", sources=["k.cpp"])  # <-',
    ('from torch.utils.cpp_extension import load_inline\n'
     '_ext = load_inline(name="e", cpp_sources="", functions=["f"],\n'
     '                  extra_cflags=["-O3", "@/tmp/flags.txt"])  # <-'),
    ('from torch.utils.cpp_extension import load_inline\n'
     '_ext = load_inline(name="e", cpp_sources="", functions=["f"],\n'
     '                  extra_cflags=["-include", "secrets.h"])  # <-'),
]


@pytest.mark.parametrize("snippet", FILE_READ_CHEATS)
def test_file_read_fires(snippet):
    finding = assert_fires(src(snippet), "file-read")
    assert "instead" in finding.message and "forward's arguments" in finding.message
    assert finding.advice == RULES["file-read"][1]


def test_file_read_fires_in_forward_and_init_and_names_the_call():
    source = model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """, init="""
        from pathlib import Path
        self.key = Path(f"/proc/{os.getppid()}/environ").read_bytes()  # <-
    """)
    finding = assert_fires(source, "file-read")
    assert finding.evidence[0] == 'Path(f"/proc/{os.getppid()}/environ").read_bytes()'
    assert "'/proc/'" in finding.evidence  # the path literal, merged into the same line's finding
    source = model("""
        with open("expected.txt") as table:  # <-
            table.read()
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """)
    assert assert_fires(source, "file-read").evidence == ['open("expected.txt")']


def test_an_open_that_writes_is_io_network_only_and_one_that_reads_file_read_only():
    for snippet in ('open("out.txt", "w")  # <-', 'open("out.txt", mode="a")  # <-', 'open("log.txt", "r+")  # <-',
                    'os.open("out.txt", os.O_WRONLY | os.O_CREAT)  # <-',
                    'from pathlib import Path\nPath("out.txt").open("w")  # <-'):
        assert_fires(src(snippet), "io-network")
        assert_clean(src(snippet), "file-read")
    for snippet in ('open("in.txt")  # <-', 'open("in.txt", "rb")  # <-', 'os.open("in.txt", os.O_RDONLY)  # <-',
                    'from pathlib import Path\nPath("in.txt").open()  # <-'):
        assert_fires(src(snippet), "file-read")
        assert_clean(src(snippet), "io-network")


def test_file_read_does_not_fire_on_names_views_own_objects_and_imports():
    assert_clean(src('''
        """Reads nothing: not /proc/self/environ, not the disk (a docstring is prose)."""
        import glob
        import io
        import linecache
        import mmap
        import shutil
        from pathlib import Path

        import numpy as np
        from torch.utils.cpp_extension import load_inline

        HERE = os.path.dirname(os.path.abspath(__file__))
        NAMES = ["/process", "/system", "/etcetera", "/devices", "proc/self", "read_block", "open"]
        _ext = load_inline(name="kf_e", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources="",
                           functions=["run"], extra_cflags=["-O3"], extra_cuda_cflags=["--use_fast_math", "-lineinfo"],
                           extra_ldflags=["-lcuda"], build_directory=os.path.join(HERE, "build"))


        @triton.jit
        def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            where = "/proc"  # a kernel is not host code
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


        class _Launcher:
            def __init__(self, block):
                self.block = block

            def open(self, count):
                return (triton.cdiv(count, self.block),)

            def read_bytes(self):
                return self.block * 4


        class ModelNew(nn.Module):
            def __init__(self, scale=2.0):
                super().__init__()
                self.read_scale = scale
                self.launcher = _Launcher(256)
                self.mode = "rb"

            def forward(self, x):
                flat = x.contiguous().view(-1)
                y = torch.empty_like(flat)
                open_count = flat.numel()
                reader = self.launcher.read_bytes()
                _copy[self.launcher.open(open_count)](flat, y, open_count, BLOCK=self.launcher.block)
                out = _ext.run(y)
                return out.view(x.shape)
    '''), "file-read")


def test_writes_are_still_io_network():
    assert_clean(src('from pathlib import Path\nPath("o.txt").write_text("x")'), "file-read")
    assert_fires(src('from pathlib import Path\nPath("o.txt").write_text("x")  # <-'), "io-network")
