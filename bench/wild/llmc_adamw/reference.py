"""llmc_adamw: the NumPy reference (float64 inside, written in place)."""
import numpy as np


def reference(params_memory, grads_memory, m_memory, v_memory, num_parameters, learning_rate, beta1, beta2,
              beta1_correction, beta2_correction, eps, weight_decay):
    g = grads_memory.astype(np.float64)
    m = beta1 * m_memory + (1.0 - beta1) * g
    v = beta2 * v_memory + (1.0 - beta2) * g * g
    p = params_memory.astype(np.float64)
    params_memory[...] = p - learning_rate * ((m / beta1_correction) / (np.sqrt(v / beta2_correction) + eps) + weight_decay * p)
    m_memory[...] = m
    v_memory[...] = v
