// MoE routing: router probabilities (softmax, or sigmoid with DeepSeek-V3's
// correction bias), group-limited top-k, the route margin and the weight
// normalisation, with the choices package model makes (model/route.go):
// scores in double where the CPU takes them in double, ties broken towards
// the lower expert index, experts of dropped groups at -inf.

#define MAX_EXPERTS 512
#define MAX_GROUPS 64

// Group limiting (groupMode).
#define GROUPS_NONE 0 // every expert is allowed
#define GROUPS_MAX 1  // group_limited_greedy: a group scores its best expert
#define GROUPS_TOP2 2 // noaux_tc: a group scores the sum of its two best

// Weight rules (rule): Hugging Face's DeepSeek-V2 and V3 gates, and
// DeepSeek's model.py.
#define RULE_HF_V2 0
#define RULE_HF_V3 1
#define RULE_MODEL_PY 2

__device__ double negInf() { return __longlong_as_double(0xfff0000000000000ULL); }
__device__ double posInf() { return __longlong_as_double(0x7ff0000000000000ULL); }

// route chooses the k experts of token t = blockIdx.x·blockDim.x +
// threadIdx.x from its router logits (row t of logits, stride ld): ids and
// weights [tokens, k] in descending selection score, margin [tokens] how
// far the decision is from a tie. bias is the correction bias or null.
extern "C" __global__ void route(const float* logits, int ld, int tokens, const float* bias, int experts, int k,
                                 int groups, int keepGroups, int groupMode, int sigmoid, int rule, int normTopK,
                                 float scale, int* ids, float* weights, float* margin) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= tokens) return;
    const float* x = logits + (long long)t * ld;
    float score[MAX_EXPERTS];
    double sel[MAX_EXPERTS];
    unsigned char taken[MAX_EXPERTS];

    if (sigmoid) {
        for (int i = 0; i < experts; i++) score[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
    } else {
        float mx = x[0];
        for (int i = 1; i < experts; i++) mx = fmaxf(mx, x[i]);
        double sum = 0.0;
        for (int i = 0; i < experts; i++) {
            double v = exp((double)(x[i] - mx));
            score[i] = (float)v;
            sum += v;
        }
        for (int i = 0; i < experts; i++) score[i] = (float)((double)score[i] / sum);
    }
    for (int i = 0; i < experts; i++) {
        sel[i] = bias ? (double)__fadd_rn(score[i], bias[i]) : (double)score[i];
        taken[i] = 0;
    }

    double m = posInf();
    if (groupMode != GROUPS_NONE && groups > 1) {
        int per = experts / groups;
        double gs[MAX_GROUPS];
        unsigned char keep[MAX_GROUPS];
        for (int g = 0; g < groups; g++) {
            double b1 = negInf(), b2 = negInf();
            for (int j = g * per; j < (g + 1) * per; j++) {
                if (sel[j] > b1) {
                    b2 = b1;
                    b1 = sel[j];
                } else if (sel[j] > b2) {
                    b2 = sel[j];
                }
            }
            gs[g] = groupMode == GROUPS_TOP2 ? b1 + b2 : b1;
            keep[g] = 0;
        }
        int last = 0;
        for (int c = 0; c < keepGroups; c++) {
            int best = -1;
            for (int g = 0; g < groups; g++)
                if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
            keep[best] = 1;
            last = best;
        }
        if (keepGroups < groups) {
            int next = -1;
            for (int g = 0; g < groups; g++)
                if (!keep[g] && (next < 0 || gs[g] > gs[next])) next = g;
            m = gs[last] - gs[next];
        }
        for (int g = 0; g < groups; g++)
            if (!keep[g])
                for (int j = g * per; j < (g + 1) * per; j++) sel[j] = negInf();
    }

    int* id = ids + (long long)t * k;
    float* w = weights + (long long)t * k;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < experts; i++)
            if (!taken[i] && (best < 0 || sel[i] > sel[best])) best = i;
        taken[best] = 1;
        id[j] = best;
        w[j] = score[best];
    }
    if (k < experts) {
        int next = -1;
        for (int i = 0; i < experts; i++)
            if (!taken[i] && (next < 0 || sel[i] > sel[next])) next = i;
        if (sel[next] != negInf()) m = fmin(m, sel[id[k - 1]] - sel[next]);
    }
    margin[t] = (float)m;

    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += w[j];
    bool norm = false, scaled = true;
    float eps = 1e-20f;
    switch (rule) {
    case RULE_HF_V2:
        norm = k > 1 && normTopK;
        scaled = !norm;
        break;
    case RULE_HF_V3:
        norm = normTopK;
        break;
    default:
        norm = sigmoid;
        eps = 0.0f;
    }
    for (int j = 0; j < k; j++) {
        if (norm) w[j] = w[j] / (sum + eps);
        if (scaled) w[j] = __fmul_rn(w[j], scale);
    }
}
