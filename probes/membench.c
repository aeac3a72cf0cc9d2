/* membench: DRAM read bandwidth (orch ceilings), the memory ceiling of a decode that streams
 * weights from RAM.
 *
 * Allocates --mib MiB (default 256, far above any last-level cache), touches it, then reads it
 * --passes times with --threads threads (default: the online CPUs), each summing its own
 * slice with independent accumulators so the loads, not the adds, set the pace. A pass is
 * timed from the first thread's start to the last one's end; passes stop early after
 * --seconds. Output, one record per line (tag, then key=value):
 *   membench version=1 mib=N threads=N
 *   pass i=N seconds=F gibps=F
 *   result best_gibps=F median_gibps=F passes=N
 * POSIX + pthreads only (static builds for x86_64 and arm64).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_PASSES 100

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct slice {
    const uint64_t *start;
    size_t words;
    uint64_t sum;
};

static void *reader(void *arg) {
    struct slice *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 8 <= s->words; i += 8) {
        a += s->start[i] ^ s->start[i + 4];
        b += s->start[i + 1] ^ s->start[i + 5];
        c += s->start[i + 2] ^ s->start[i + 6];
        d += s->start[i + 3] ^ s->start[i + 7];
    }
    for (; i < s->words; i++) a += s->start[i];
    s->sum = a + b + c + d;   /* kept, so the reads cannot be optimised away */
    return NULL;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void usage(void) {
    fprintf(stderr, "usage: membench [--mib MiB] [--passes N] [--threads N] [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    long mib = 256, passes = 5, threads = sysconf(_SC_NPROCESSORS_ONLN);
    double seconds = 10.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--mib")) mib = atol(v);
        else if (!strcmp(a, "--passes")) passes = atol(v);
        else if (!strcmp(a, "--threads")) threads = atol(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else usage();
        i++;
    }
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (mib < 1 || passes < 1 || passes > MAX_PASSES || seconds <= 0) usage();
    size_t bytes = (size_t)mib * 1024 * 1024, words = bytes / 8;
    uint64_t *buf;
    if (posix_memalign((void **)&buf, 4096, bytes) != 0) {
        printf("error msg=cannot allocate %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;  /* real pages */
    printf("membench version=1 mib=%ld threads=%ld\n", mib, threads);
    fflush(stdout);

    double rates[MAX_PASSES];
    long done = 0;
    uint64_t check = 0;
    double t_end = now_s() + seconds;
    struct slice sl[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    size_t per = words / (size_t)threads;
    for (long p = 0; p < passes; p++) {
        double t0 = now_s();
        for (long t = 0; t < threads; t++) {
            sl[t].start = buf + (size_t)t * per;
            sl[t].words = t == threads - 1 ? words - (size_t)t * per : per;
            if (pthread_create(&th[t], NULL, reader, &sl[t]) != 0) {
                printf("error msg=pthread_create failed\n");
                return 1;
            }
        }
        for (long t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            check += sl[t].sum;
        }
        double dt = now_s() - t0;
        rates[done] = dt > 0 ? (double)bytes / dt / (1024.0 * 1024.0 * 1024.0) : 0.0;
        printf("pass i=%ld seconds=%.6f gibps=%.3f\n", p, dt, rates[done]);
        fflush(stdout);
        done++;
        if (now_s() > t_end) break;
    }
    double sorted[MAX_PASSES], best = 0;
    memcpy(sorted, rates, sizeof(double) * (size_t)done);
    qsort(sorted, (size_t)done, sizeof(double), cmp_double);
    for (long i = 0; i < done; i++) if (rates[i] > best) best = rates[i];
    double median = done % 2 ? sorted[done / 2] : (sorted[done / 2 - 1] + sorted[done / 2]) / 2;
    printf("result best_gibps=%.3f median_gibps=%.3f passes=%ld checksum=%llu\n", best, median,
           done, (unsigned long long)(check & 0xffff));
    free(buf);
    return 0;
}
