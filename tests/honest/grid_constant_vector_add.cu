// task: vector_add
// covers: grid_constant
// note: every parameter is a __grid_constant__ (const-qualified, read in place from the parameter
// note: space, its address may be taken): the pointers and n, whose address the loop reads through.
// kforge: grid = [min(cdiv(n, 256), 4096)]
// kforge: block = [256]
extern "C" __global__ void vector_add(const float* const __grid_constant__ a, const float* const __grid_constant__ b,
                                      float* const __grid_constant__ c, const __grid_constant__ int n)
{
    const int* count = &n;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < *count;
         i += (long long)gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}
