/* The default MLP's eight matrix products (784-512-256-10, kiln::linear's shapes and
 * transposes) through a CBLAS library, µs each (mean over REPS calls after 20 warm-up
 * rounds), interleaved as a step issues them. blas_shapes.sh builds it against each
 * library and times the same calls, the same way, through libtorch (MKL) beside it. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float* filled(long n) {
  float* p = malloc((size_t)n * sizeof(float));
  if (!p) exit(1);
  for (long i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return p;
}

int main(int argc, char** argv) {
  const int batch = argc > 1 ? atoi(argv[1]) : 128, reps = argc > 2 ? atoi(argv[2]) : 200;
  const int w[4] = {784, 512, 256, 10};
  float *act[4], *gact[4], *wt[3], *dw[3];
  for (int i = 0; i < 4; i++) act[i] = filled((long)batch * w[i]), gact[i] = filled((long)batch * w[i]);
  for (int i = 0; i < 3; i++) wt[i] = filled((long)w[i + 1] * w[i]), dw[i] = filled((long)w[i + 1] * w[i]);
  double fwd[3] = {0}, dwt[3] = {0}, dx[3] = {0};
  for (int r = 0; r < reps + 20; r++) {
    const int timed = r >= 20;
    for (int i = 0; i < 3; i++) {  /* z = x·wᵀ */
      const double t = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, w[i + 1], w[i], 1.f, act[i], w[i], wt[i],
                  w[i], 0.f, act[i + 1], w[i + 1]);
      if (timed) fwd[i] += now() - t;
    }
    for (int i = 2; i >= 0; i--) {  /* dw = gᵀ·x, dx = g·w */
      double t = now();
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w[i + 1], w[i], batch, 1.f, gact[i + 1], w[i + 1],
                  act[i], w[i], 0.f, dw[i], w[i]);
      if (timed) dwt[i] += now() - t;
      if (i == 0) continue;
      t = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, w[i], w[i + 1], 1.f, gact[i + 1], w[i + 1],
                  wt[i], w[i], 0.f, gact[i], w[i]);
      if (timed) dx[i] += now() - t;
    }
  }
  double sum = 0;
  printf("batch %d gemm ", batch);
  for (int i = 0; i < 3; i++) {
    printf("  fwd%d %.0f  dw%d %.0f", i + 1, fwd[i] / reps * 1e6, i + 1, dwt[i] / reps * 1e6);
    if (i > 0) printf("  dx%d %.0f", i + 1, dx[i] / reps * 1e6);
    sum += fwd[i] + dwt[i] + dx[i];
  }
  printf("  sum %.0f µs\n", sum / reps * 1e6);
  return 0;
}
