"""The scan of CUDA/C++ sources: library-compute and cpp-system fire on what a source calls or names, and
not on members, the source's own names, device code and prose."""

import textwrap

import pytest

from tests.guard.static.helpers import assert_clean, assert_fires, src


# -- library-compute ------------------------------------------------------------------------------

def _cuda(body: str) -> str:
    return src('SRC = r"""\n#include <torch/extension.h>\n' + textwrap.dedent(body).strip("\n") + '\n"""\n')


LIBRARY_CHEATS = {
    "cublas_call": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            auto c = torch::empty({a.size(0), b.size(1)}, a.options());
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr, nullptr, 1);  // <-
            return c;
        }
    """),
    "cudnn_include": _cuda("""
        #include <cudnn.h>  // <-
    """),
    "cutlass": _cuda("""
        using Gemm = cutlass::gemm::device::Gemm<float, cutlass::layout::RowMajor>;  // <-
    """),
    "at_matmul": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            return at::matmul(a, b);  // <-
        }
    """),
    "torch_relu": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return torch::relu(a);  // <-
        }
    """),
    "tensor_method_in_cpp": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            return a.matmul(b);  // <-
        }
    """),
    "aten_native": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return at::native::softmax(a, 1, false);  // <-
        }
    """),
    "own_host_function_named_like_the_op": _cuda("""
        torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
            return a.matmul(b);  // <-
        }
    """),
    "torch_nn_functional": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return torch::nn::functional::gelu(a);  // <-
        }
    """),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_CHEATS))
def test_library_compute_fires(name):
    assert_fires(LIBRARY_CHEATS[name], "library-compute")


def test_library_compute_does_not_fire_on_allocation_query_and_prose():
    assert_clean(src('''
        """A kernel that is faster than cuBLAS (the docstring may say so) and uses at::matmul nowhere."""
        SRC = r"""
        #include <torch/extension.h>
        // unlike cublasSgemm, this kernel fuses the epilogue; at::matmul is the reference
        /* cudnn would need a workspace */
        __global__ void k(const float* x, float* y, long n) {
            long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
            if (i < n) y[i] = fmaxf(x[i], 0.0f);
        }
        torch::Tensor run(torch::Tensor x) {
            TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "no at::matmul fallback here");
            auto xc = x.contiguous();
            auto y = torch::empty_like(xc);
            auto z = torch::zeros({xc.size(0)}, xc.options().dtype(torch::kFloat32));
            auto w = at::empty({4}, xc.options());
            long n = xc.numel();
            int64_t s0 = xc.stride(0);
            auto stream = at::cuda::getCurrentCUDAStream();
            k<<<(n + 255) / 256, 256, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """
        CPP = "torch::Tensor run(torch::Tensor x);"
        ACC = r"""
        #include <torch/extension.h>
        struct Acc {
            float s = 0.f;
            __device__ void add(float v) { s += v; }
            __device__ float max(float a, float b) const { return a > b ? a : b; }
        };
        __global__ void k(const float* x, float* y) { Acc acc; acc.add(x[0]); y[0] = acc.max(acc.s, 0.f); }
        void launch(torch::Tensor x, torch::Tensor y) {
            at::parallel_for(0, 1, 1, [&](int64_t b, int64_t e) {});
            k<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr<float>());
        }
        """
    '''))


# -- cpp-system -----------------------------------------------------------------------------------

CPP_SYSTEM_CHEATS = {
    "fopen": _cuda("""
        int64_t leak() {
            FILE* f = fopen("/proc/self/environ", "rb");  // <-
            return f != nullptr;
        }
    """),
    "std_fopen": _cuda("""
        int64_t leak() { auto* f = std::fopen("data.bin", "rb"); return f != nullptr; }  // <-
    """),
    "freopen": _cuda("""
        void leak() { freopen("data.txt", "r", stdin); }  // <-
    """),
    "posix_open": _cuda("""
        int leak(const char* p) { return open(p, 0); }  // <-
    """),
    "global_open": _cuda("""
        int leak(const char* p) { return ::open(p, 0); }  // <-
    """),
    "openat": _cuda("""
        int leak(const char* p) { return openat(-100, p, 0); }  // <-
    """),
    "creat": _cuda("""
        int leak(const char* p) { return creat(p, 0644); }  // <-
    """),
    "free_read": _cuda("""
        long leak(int fd, char* b) {
            return read(fd, b, 16);  // <-
        }
    """),
    "pread": _cuda("""
        long leak(int fd, char* b) { return pread(fd, b, 16, 0); }  // <-
    """),
    "free_write": _cuda("""
        long leak(int fd) { return write(fd, "x", 1); }  // <-
    """),
    "opendir": _cuda("""
        void* leak() { return opendir("."); }  // <-
    """),
    "readdir": _cuda("""
        void leak(DIR* d) { while (readdir(d)) {} }  // <-
    """),
    "scandir": _cuda("""
        int leak(dirent*** out) { return scandir(".", out, nullptr, nullptr); }  // <-
    """),
    "stat": _cuda("""
        int leak(struct stat* st) { return stat("data.bin", st); }  // <-
    """),
    "lstat": _cuda("""
        int leak(struct stat* st) { return lstat("data.bin", st); }  // <-
    """),
    "fstat": _cuda("""
        int leak(int fd, struct stat* st) { return fstat(fd, st); }  // <-
    """),
    "system": _cuda("""
        void leak() { system("nvidia-smi -lgc 2100"); }  // <-
    """),
    "std_system": _cuda("""
        void leak() { std::system("id"); }  // <-
    """),
    "popen": _cuda("""
        void leak() { auto* p = popen("id", "r"); }  // <-
    """),
    "execl": _cuda("""
        void leak() { execl("/bin/sh", "sh", nullptr); }  // <-
    """),
    "execvp": _cuda("""
        void leak(char** argv) { execvp("sh", argv); }  // <-
    """),
    "execve": _cuda("""
        void leak(char** argv, char** env) { execve("/bin/sh", argv, env); }  // <-
    """),
    "fork": _cuda("""
        int leak() { return fork(); }  // <-
    """),
    "vfork": _cuda("""
        int leak() { return vfork(); }  // <-
    """),
    "clone": _cuda("""
        int leak(int (*fn)(void*), void* stack) { return clone(fn, stack, 0, nullptr); }  // <-
    """),
    "posix_spawn": _cuda("""
        int leak(pid_t* pid, char** av, char** ev) { return posix_spawn(pid, "sh", nullptr, nullptr, av, ev); }  // <-
    """),
    "socket": _cuda("""
        int leak() { return socket(2, 1, 0); }  // <-
    """),
    "connect": _cuda("""
        int leak(int s, const void* a) { return connect(s, (const struct sockaddr*) a, 16); }  // <-
    """),
    "bind": _cuda("""
        int leak(int s, const void* a) { return bind(s, (const struct sockaddr*) a, 16); }  // <-
    """),
    "getenv": _cuda("""
        bool timed() { return getenv("KFOUNDRY_WORKER_DEVICE") != nullptr; }  // <-
    """),
    "std_getenv": _cuda("""
        bool timed() { return std::getenv("KFOUNDRY_WORKER_DEVICE") != nullptr; }  // <-
    """),
    "secure_getenv": _cuda("""
        bool timed() { return secure_getenv("HOME") != nullptr; }  // <-
    """),
    "environ": _cuda("""
        extern char** environ;  // <-
    """),
    "dlopen": _cuda("""
        void* leak() { return dlopen("libcuda.so", 2); }  // <-
    """),
    "dlsym": _cuda("""
        void* leak(void* h) { return dlsym(h, "cuLaunchKernel"); }  // <-
    """),
    "mmap": _cuda("""
        void* leak(int fd) { return mmap(nullptr, 4096, 1, 1, fd, 0); }  // <-
    """),
    "ptrace": _cuda("""
        long leak(int pid) { return ptrace(16, pid, nullptr, nullptr); }  // <-
    """),
    "syscall": _cuda("""
        long leak() { return syscall(39); }  // <-
    """),
    "ifstream": _cuda("""
        void leak() { std::ifstream in("data.txt"); }  // <-
    """),
    "ofstream": _cuda("""
        void leak() { std::ofstream out("cache.json"); }  // <-
    """),
    "fstream": _cuda("""
        void leak() { std::fstream io("cache.json"); }  // <-
    """),
    "file_pointer": _cuda("""
        void leak(FILE *f) {}  // <-
    """),
    "function_pointer": _cuda("""
        auto opener = &popen;  // <-
    """),
    "macro": _cuda("""
        #define OPEN_IT fopen  // <-
    """),
    "proc_literal": _cuda("""
        const char* where = "/proc/self/status";  // <-
    """),
    "sys_literal": _cuda("""
        const char* where = "/sys/class/net";  // <-
    """),
    "dev_literal": _cuda("""
        const char* where = "/dev/shm/out";  // <-
    """),
    "etc_literal": _cuda("""
        const char* where = "/etc/hosts";  // <-
    """),
    "tmp_literal": _cuda("""
        const char* where = "/tmp/kfoundry-cache";  // <-
    """),
    "raw_string_literal": _cuda("""
        const char* where = R"(/proc/1/environ)";  // <-
    """),
    "absolute_include": _cuda("""
        #include "/proc/self/environ"  // <-
    """),
    "raw_syscall_asm": _cuda("""
        long leak() { long r; asm volatile("syscall" : "=a"(r) : "a"(39)); return r; }  // <-
    """),
    "python_from_cpp": _cuda("""
        void leak() { pybind11::module_::import("os"); }  // <-
    """),
    "qualifiers_defined_away": _cuda("""
        #define __device__  // <-
    """),
    "token_pasting": _cuda("""
        #define CAT(a, b) a##b  // <-
    """),
    "multi_line_raw_string_does_not_hide_code": _cuda("""
        const char* banner = R"(
        a "quoted" word
        )";
        int leak() { return system("id"); }  // <-
    """),
    "digit_separator_does_not_hide_code": _cuda("""
        long big = 1'000'000; int leak() { return system("id"); } long small = 1'0;  // <-
    """),
    "source_without_markers_passed_to_load_inline": src('''
        from torch.utils.cpp_extension import load_inline

        CPP = """
        int f() {
            return system("id");  // <-
        }
        """
        _ext = load_inline(name="e", cpp_sources=[CPP], functions=["f"])
    '''),
    "device_function_in_cpp_sources_is_host_code": src('''
        from torch.utils.cpp_extension import load_inline

        CPP = r"""
        #include <cuda_runtime.h>
        __device__ int f(const char* p) {
            return fopen(p, "r") != nullptr;  // <-
        }
        """
        _ext = load_inline(name="e", cpp_sources=CPP, functions=["f"])
    '''),
}


@pytest.mark.parametrize("name", sorted(CPP_SYSTEM_CHEATS))
def test_cpp_system_fires(name):
    finding = assert_fires(CPP_SYSTEM_CHEATS[name], "cpp-system")
    assert "CUDA/C++ source" in finding.message and "instead" in finding.message


def test_cpp_system_does_not_fire_on_members_own_names_device_code_and_prose():
    assert_clean(src('''
        from torch.utils.cpp_extension import load_inline

        CUDA = r"""
        #include <torch/extension.h>
        #include <cstdio>
        #include <fstream>
        // unlike a version that would fopen() a cache or getenv() a flag, this one only computes
        /* system("...") is not called here either; "/proc" in a comment is prose */
        struct Cursor { const float* read; float* write; long open; int stat; };
        struct Reader {
            const float* p;
            __host__ __device__ float read(int i) const { return p[i]; }
        };
        __device__ __forceinline__ float read(const float* p, int i) { return __ldg(p + i); }
        __device__ float load_twice(const float* p, int i) { return read(p, i) + read(p, i); }
        __global__ void read_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = read(x, i);
            if (i == 0) printf("read_kernel: %d elements\\n", n);
        }
        static long read_block(const Cursor& c, long i) { return c.read[i] > 0.f ? 1 : 0; }
        torch::Tensor open_close(torch::Tensor x, bool write) {
            TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
            auto y = at::empty_like(x);
            Cursor c{x.data_ptr<float>(), y.data_ptr<float>(), 0, 0};
            Cursor* p = &c;
            p->write = c.write;
            Reader r{c.read};
            long total = 1'000'000;
            auto bound = std::bind(read_block, c, 0L);
            int n = x.numel();
            read_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            cudaMemcpy(y.data_ptr<float>(), x.data_ptr<float>(), 0, cudaMemcpyDeviceToDevice);
            use(x, write);
            return y;
        }
        """
        CPP = "torch::Tensor open_close(torch::Tensor x, bool write);"
        _ext = load_inline(name="kf_e", cpp_sources=CPP, cuda_sources=CUDA, functions=["open_close"],
                           extra_cuda_cflags=["-O3", "--use_fast_math"])
    '''), "cpp-system")
    # a source of the candidate's own with struct fields and helpers named like libc, built with g++
    assert_clean(src('''
        from torch.utils.cpp_extension import load_inline

        CPP = r"""
        struct Span { long read; long write; };
        struct Reader { long block; long read(long n) const { return (n + block - 1) / block; } };
        static Span read_block(long n, long b) { Reader r{b}; Span s; s.read = n; s.write = r.read(n); return s; }
        long blocks(long n, long block) { Span s = read_block(n, block); const Span* p = &s; return p->write; }
        """
        _ext = load_inline(name="kf_e", cpp_sources=CPP, functions=["blocks"])
    '''))
