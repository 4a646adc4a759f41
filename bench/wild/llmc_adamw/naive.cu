// Ported from https://github.com/karpathy/llm.c (MIT), dev/cuda/adamw.cu at commit f1e2ace65149:
// adamw_kernel1, 512 threads a block; `long num_parameters` written `long long` (NVRTC's width of long is the host's).
extern "C" __global__ void adamw(float* params_memory, const float* grads_memory, float* m_memory, float* v_memory, long long num_parameters,
                              float learning_rate, float beta1, float beta2, float beta1_correction, float beta2_correction, float eps, float weight_decay) {
   int i = blockIdx.x * blockDim.x + threadIdx.x;
   if (i >= num_parameters) return;  // guard
   // update the first moment (momentum)
   m_memory[i] = beta1 * m_memory[i] + (1.0f - beta1) * grads_memory[i];
   // update the second moment (RMSprop)
   v_memory[i] = beta2 * v_memory[i] + (1.0f - beta2) * grads_memory[i] * grads_memory[i];
   float m_hat = m_memory[i] / beta1_correction;
   float v_hat = v_memory[i] / beta2_correction;
   params_memory[i] -= learning_rate * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params_memory[i]);
}
