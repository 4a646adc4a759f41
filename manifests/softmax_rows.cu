// softmax_rows: y[r, :] = softmax(x[r, :]) for each of `rows` rows of length `cols` (row-major).
// Numerically stable: the row maximum is subtracted before exponentiating.
// Naive initial kernel: one thread per row, three passes over the row (max, exp + sum, scale);
// launched with the manifest's grid = [cdiv(rows, 128)], block = [128].
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows || cols <= 0) {
        return;
    }
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;

    float mx = xr[0];
    for (int j = 1; j < cols; ++j) {
        mx = fmaxf(mx, xr[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < cols; ++j) {
        float e = expf(xr[j] - mx);
        yr[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < cols; ++j) {
        yr[j] *= inv;
    }
}
