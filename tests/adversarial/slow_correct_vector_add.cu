// task: vector_add
// expect: passed
// note: correct but slow: the manifest's launch (256-thread blocks), but only thread 0 of each
// note: block works, adding the block's 256 elements one after another. Same float additions,
// note: so the results are bit-identical to the naive kernel's and every check passes, but
// note: 1/256 of the threads carry all the memory traffic: the score must come out well above
// note: the initial kernel's (the GPU test asks for more than 1.5x; expect over 5x).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    if (threadIdx.x != 0) {
        return;
    }
    long long base = (long long)blockIdx.x * blockDim.x;
    for (int j = 0; j < (int)blockDim.x; ++j) {
        long long i = base + j;
        if (i < n) {
            c[i] = a[i] + b[i];
        }
    }
}
