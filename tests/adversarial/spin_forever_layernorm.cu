// task: layernorm
// expect: timeout
// note: every thread spins until a device-global flag that nothing ever sets becomes non-zero.
// note: The flag is volatile, so each iteration really loads it and the loop cannot be removed.
// note: The first checked launch never finishes; the gate waits launch_timeout_s (+30 s of
// note: start-up allowance for the first launch of a case), kills the worker -> timeout.
__device__ volatile int g_release = 0;

extern "C" __global__ void layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps)
{
    while (g_release == 0) {
        __nanosleep(1000);
    }
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows && cols > 0) {
        y[(size_t)row * cols] = x[(size_t)row * cols] * gamma[0] + beta[0] + eps;
    }
}
