// task: layernorm
// covers: struct_global, large_global, double_global
// note: per-row statistics kept in a 1 MB __device__ array of structs (a double, a float and an int
// note: per row): one block per row computes the mean and 1/sqrt(var + eps) in double, thread 0
// note: stores them there, __syncthreads() makes the store visible to the block, every thread reads
// note: them back. Rows beyond the array use shared memory only. Rewritten before it is read on
// note: every launch: module state, not a cache.
// kforge: grid = [rows]
// kforge: block = [128]
#define MAX_ROWS 32768

struct RowStats {
    double mean;
    float rstd;
    int row;
};

__device__ RowStats g_rows[MAX_ROWS];

extern "C" __global__ void __launch_bounds__(128) layernorm(const float* __restrict__ x, const float* __restrict__ gamma,
                                                            const float* __restrict__ beta, float* __restrict__ y,
                                                            int rows, int cols, float eps)
{
    __shared__ double red[128];
    __shared__ RowStats s_stats;
    const int row = blockIdx.x, t = threadIdx.x;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    double s = 0.0;
    for (int j = t; j < cols; j += 128) {
        s += xr[j];
    }
    red[t] = s;
    __syncthreads();
    for (int k = 64; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    const double mean = red[0] / cols;
    __syncthreads();
    double q = 0.0;
    for (int j = t; j < cols; j += 128) {
        const double d = xr[j] - mean;
        q += d * d;
    }
    red[t] = q;
    __syncthreads();
    for (int k = 64; k > 0; k >>= 1) {
        if (t < k) red[t] += red[t + k];
        __syncthreads();
    }
    if (t == 0) {
        RowStats st;
        st.mean = mean;
        st.rstd = (float)(1.0 / sqrt(red[0] / cols + (double)eps));
        st.row = row;
        if (row < MAX_ROWS) {
            g_rows[row] = st;
        } else {
            s_stats = st;
        }
    }
    __syncthreads();
    const RowStats st = row < MAX_ROWS ? g_rows[row] : s_stats;
    const float m = (float)st.mean, r = st.rstd;
    for (int j = t; j < cols; j += 128) {
        yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
    }
}
