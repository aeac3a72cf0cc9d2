/* iobench: the storage ceiling of the file system that holds the models (orch ceilings).
 *
 * Creates a test file of --size MiB under --path, then
 *   1. sequential reads of --sample-mib MiB at --samples different offsets (O_DIRECT, so the
 *      page cache is bypassed: the flash's own rate, as the Celeron study's `dd iflag=direct`);
 *   2. a lanes x read-size sweep: L threads (pthreads) take blocks of S KiB from one shared
 *      counter in a scrambled order, as an expert-streaming engine's read lanes do, for at
 *      most --seconds per cell (and at most one pass over the file).
 * When O_DIRECT is refused (tmpfs, some FUSE mounts) it falls back to buffered reads after
 * posix_fadvise(DONTNEED) and says so (`mode direct=0 ...`): the figure then is not flash.
 * `--buffered` asks for that fallback (to compare, or to test it where O_DIRECT works).
 * The file is deleted at the end (also on SIGINT/SIGTERM).
 *
 * Output: one record per line, a tag then key=value fields, for the controller to parse:
 *   iobench version=1 path=... size_mib=N
 *   mode direct=1|0 reason=...
 *   seq offset_mib=N mib=N seconds=F mibps=F
 *   lanes lanes=N read_kib=N mib=F seconds=F mibps=F
 *   done
 * Errors: `error msg=...` on stdout and exit code 1 (2 for bad arguments).
 * POSIX + Linux O_DIRECT only, so it builds static for x86_64 and arm64 (Android included).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024L * 1024L)
#define ALIGN 4096
#define MAX_LIST 16

static char file_path[4096];
static volatile sig_atomic_t stop_now;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void cleanup(void) {
    if (file_path[0]) unlink(file_path);
}

static void on_signal(int sig) {
    (void)sig;
    stop_now = 1;
}

static void fail(const char *what) {
    printf("error msg=%s: %s\n", what, strerror(errno));
    fflush(stdout);
    cleanup();
    exit(1);
}

static int parse_list(const char *text, long *out) {
    int n = 0;
    const char *p = text;
    while (*p && n < MAX_LIST) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v <= 0) return -1;
        out[n++] = v;
        p = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void drop_cache(int fd) {
    /* needed only for buffered reads; harmless for O_DIRECT ones */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void make_file(long size_mib) {
    int fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) fail("create test file");
    char *buf = malloc(MIB);
    if (!buf) fail("malloc");
    uint64_t x = 0x9E3779B97F4A7C15ull;   /* incompressible bytes (xorshift) */
    for (long m = 0; m < size_mib && !stop_now; m++) {
        uint64_t *w = (uint64_t *)buf;
        for (size_t i = 0; i < MIB / 8; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            w[i] = x;
        }
        if (write(fd, buf, MIB) != MIB) fail("write test file");
    }
    if (fsync(fd) != 0) fail("fsync test file");
    drop_cache(fd);
    close(fd);
    free(buf);
}

/* Open for reading with O_DIRECT when the file system honours it (a read must succeed: some
   FUSE mounts accept the flag and fail the read). direct=0 with the reason otherwise. */
static int open_reader(int buffered, int *direct, char *reason, size_t reason_len) {
    int fd = buffered ? -1 : open(file_path, O_RDONLY | O_DIRECT);
    if (fd >= 0) {
        void *probe;
        if (posix_memalign(&probe, ALIGN, ALIGN) != 0) fail("posix_memalign");
        ssize_t got = pread(fd, probe, ALIGN, 0);
        int err = errno;
        free(probe);
        if (got == ALIGN) {
            *direct = 1;
            return fd;
        }
        snprintf(reason, reason_len, "O_DIRECT read refused (%s)", strerror(err));
        close(fd);
    } else if (buffered) {
        snprintf(reason, reason_len, "--buffered asked for");
    } else {
        snprintf(reason, reason_len, "O_DIRECT open refused (%s)", strerror(errno));
    }
    *direct = 0;
    fd = open(file_path, O_RDONLY);
    if (fd < 0) fail("open test file");
    return fd;
}

static void seq_sample(int fd, long offset_mib, long mib, char *buf, long chunk) {
    drop_cache(fd);
    off_t off = (off_t)offset_mib * MIB, end = off + (off_t)mib * MIB;
    double t0 = now_s();
    long done = 0;
    while (off < end && !stop_now) {
        ssize_t got = pread(fd, buf, (size_t)chunk, off);
        if (got <= 0) fail("sequential read");
        off += got;
        done += got;
    }
    double dt = now_s() - t0;
    printf("seq offset_mib=%ld mib=%.3f seconds=%.6f mibps=%.3f\n", offset_mib,
           (double)done / MIB, dt, dt > 0 ? (double)done / MIB / dt : 0.0);
    fflush(stdout);
}

struct sweep {
    int fd;
    long block;          /* bytes per read */
    long nblocks;
    long next;           /* shared counter (atomic) */
    double deadline;
    long long bytes;     /* atomic */
    int failed;
};

static void *lane(void *arg) {
    struct sweep *s = arg;
    void *buf;
    if (posix_memalign(&buf, ALIGN, (size_t)s->block) != 0) {
        s->failed = ENOMEM;
        return NULL;
    }
    for (;;) {
        long i = __sync_fetch_and_add(&s->next, 1);
        if (i >= s->nblocks || stop_now || now_s() > s->deadline) break;
        /* scrambled order: block i -> (i * p) mod n with p prime and larger than any block
           count, so every block is read once, no two lanes read neighbouring blocks in step
           and readahead cannot help a buffered fallback */
        long b = (long)(((unsigned long long)i * 2654435761ull) % (unsigned long long)s->nblocks);
        ssize_t got = pread(s->fd, buf, (size_t)s->block, (off_t)b * s->block);
        if (got < 0) {
            s->failed = errno;
            break;
        }
        __sync_fetch_and_add(&s->bytes, (long long)got);
    }
    free(buf);
    return NULL;
}

static void sweep_cell(int fd, long size_mib, int lanes, long kib, double seconds) {
    struct sweep s = {0};
    pthread_t th[64];
    s.fd = fd;
    s.block = kib * 1024L;
    s.nblocks = (long)(((long long)size_mib * MIB) / s.block);
    drop_cache(fd);
    double t0 = now_s();
    s.deadline = t0 + seconds;
    int started = 0;
    for (int i = 0; i < lanes; i++) {
        if (pthread_create(&th[i], NULL, lane, &s) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double dt = now_s() - t0;
    if (s.failed) {
        errno = s.failed;
        fail("lane read");
    }
    printf("lanes lanes=%d read_kib=%ld mib=%.3f seconds=%.6f mibps=%.3f\n", started, kib,
           (double)s.bytes / MIB, dt, dt > 0 ? (double)s.bytes / MIB / dt : 0.0);
    fflush(stdout);
}

static void usage(void) {
    fprintf(stderr,
            "usage: iobench [--path DIR] [--size MiB] [--samples N] [--sample-mib MiB]\n"
            "               [--lanes 1,2,4,8] [--sizes 64,256,1024,4096 (KiB)] [--seconds S]\n"
            "               [--no-sweep] [--buffered]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *dir = ".";
    long size_mib = 256, samples = 3, sample_mib = 0;
    long lanes[MAX_LIST] = {1, 2, 4, 8}, sizes[MAX_LIST] = {64, 256, 1024, 4096};
    int n_lanes = 4, n_sizes = 4, sweep = 1, buffered = 0;
    double seconds = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-sweep")) { sweep = 0; continue; }
        if (!strcmp(a, "--buffered")) { buffered = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--path")) dir = v;
        else if (!strcmp(a, "--size")) size_mib = atol(v);
        else if (!strcmp(a, "--samples")) samples = atol(v);
        else if (!strcmp(a, "--sample-mib")) sample_mib = atol(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--lanes")) n_lanes = parse_list(v, lanes);
        else if (!strcmp(a, "--sizes")) n_sizes = parse_list(v, sizes);
        else usage();
        i++;
    }
    if (size_mib < 4 || samples < 1 || seconds <= 0 || n_lanes < 1 || n_sizes < 1) usage();
    for (int i = 0; i < n_lanes; i++) if (lanes[i] > 64) usage();
    for (int i = 0; i < n_sizes; i++) if (sizes[i] % 4 || sizes[i] * 1024L > size_mib * MIB) usage();
    if (sample_mib <= 0 || sample_mib > size_mib) sample_mib = size_mib / 2 > 0 ? size_mib / 2 : 1;

    snprintf(file_path, sizeof file_path, "%s/.orch-iobench-%ld.tmp", dir, (long)getpid());
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    printf("iobench version=1 path=%s size_mib=%ld\n", dir, size_mib);
    fflush(stdout);
    make_file(size_mib);

    int direct;
    char reason[200] = "";
    int fd = open_reader(buffered, &direct, reason, sizeof reason);
    if (direct) printf("mode direct=1\n");
    else printf("mode direct=0 reason=%s; buffered reads after posix_fadvise(DONTNEED)\n", reason);
    fflush(stdout);

    long chunk = size_mib >= 4 ? 4 * MIB : MIB;
    void *buf;
    if (posix_memalign(&buf, ALIGN, (size_t)chunk) != 0) fail("posix_memalign");
    for (long s = 0; s < samples && !stop_now; s++) {
        /* offsets spread over the file: first at 0, last ending at its end */
        long span = size_mib - sample_mib;
        long offset = samples > 1 ? span * s / (samples - 1) : 0;
        seq_sample(fd, offset, sample_mib, buf, chunk);
    }
    free(buf);
    if (sweep)
        for (int si = 0; si < n_sizes && !stop_now; si++)
            for (int li = 0; li < n_lanes && !stop_now; li++)
                sweep_cell(fd, size_mib, (int)lanes[li], sizes[si], seconds);
    close(fd);
    cleanup();
    if (stop_now) {
        printf("error msg=interrupted\n");
        return 1;
    }
    printf("done\n");
    return 0;
}
