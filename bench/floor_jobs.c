/*
 * The floor for N separate `true` jobs on SLOTS GPUs with each job in its
 * own cgroups, for bench/floor.sh: the work any isolating scheduler cannot
 * avoid, done by one process with nothing else. Per job: a client process
 * (/bin/true, the submission), a group made in each cgroup v1 hierarchy
 * ysched uses (memory, devices, pids, cpu, freezer) or one cgroup2 group,
 * a fork that joins them and execs `sh -c true` (the job), and, once it has
 * ended, the groups removed. At most SLOTS jobs run at once.
 *
 * usage: floor_jobs N SLOTS [CGROUP_ROOT]   (root; CGROUP_ROOT=/sys/fs/cgroup)
 * Prints the seconds from the first submission until every job has ended
 * and its groups are gone.
 *
 * usage: floor_jobs lat REPS [CGROUP_ROOT [clone3]]   (CGROUP_ROOT `none`:
 * no cgroups, the same harness)
 * The latency floor with cgroups: per rep, a client process, the job's
 * groups made, and a job `sh -c 'date +%s.%N'` in them; prints the median
 * seconds from before the client until the job's shell printed the time,
 * the reps 100 ms apart.
 * With cgroup2 and `clone3`, the job starts in its group
 * (CLONE_INTO_CGROUP) instead of moving there after its fork.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *v1[] = {"memory", "devices", "pids", "cpu", "freezer"};
static char parents[5][512];
static int nparents;

struct slot {
    pid_t pid;
    int job;
};

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void group_path(char *out, size_t size, int parent, int job) {
    snprintf(out, size, "%.500s/floor_%d", parents[parent], job);
}

static void make_groups(int job) {
    char path[600];
    for (int p = 0; p < nparents; p++) {
        group_path(path, sizeof path, p, job);
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            die(path);
    }
}

static void remove_groups(int job) {
    char path[600];
    for (int p = 0; p < nparents; p++) {
        group_path(path, sizeof path, p, job);
        /* Busy for a moment after the last task exits. */
        while (rmdir(path) != 0 && errno == EBUSY)
            usleep(100);
    }
}

/* In the child: moves this process into group `job` of each hierarchy. */
static void join_groups(int job) {
    char path[640], me[32];
    int len = snprintf(me, sizeof me, "%d", getpid());
    for (int p = 0; p < nparents; p++) {
        group_path(path, sizeof path, p, job);
        strcat(path, "/cgroup.procs");
        int fd = open(path, O_WRONLY);
        if (fd < 0 || write(fd, me, len) != len)
            _exit(126);
        close(fd);
    }
}

static void start_job(struct slot *slot, int job) {
    make_groups(job);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        join_groups(job);
        execl("/bin/sh", "sh", "-c", "true", (char *)NULL);
        _exit(127);
    }
    slot->pid = pid;
    slot->job = job;
}

static void reap_one(struct slot *slots, int n) {
    int status;
    pid_t pid = wait(&status);
    if (pid < 0)
        die("wait");
    for (int i = 0; i < n; i++)
        if (slots[i].pid == pid) {
            remove_groups(slots[i].job);
            slots[i].pid = 0;
            return;
        }
}


static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double realtime(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Forks the job into group `job`: moved there after the fork, or (cgroup2
 * with `into`) started there by clone3. Its standard output is `out`. */
static pid_t fork_job(int job, int out, int into) {
    char path[640];
    pid_t pid;
    if (into) {
        group_path(path, sizeof path, 0, job);
        int dir = open(path, O_RDONLY | O_DIRECTORY);
        if (dir < 0)
            die(path);
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.flags = CLONE_INTO_CGROUP;
        args.exit_signal = SIGCHLD;
        args.cgroup = dir;
        pid = syscall(SYS_clone3, &args, sizeof args);
        close(dir);
    } else {
        pid = fork();
    }
    if (pid < 0)
        die("fork");
    if (pid > 0)
        return pid;
    if (!into)
        join_groups(job);
    dup2(out, 1);
    execl("/bin/sh", "sh", "-c", "date +%s.%N", (char *)NULL);
    _exit(127);
}

static int latency(int reps, int into) {
    double *took = calloc(reps, sizeof *took);
    for (int rep = 0; rep < reps; rep++) {
        /* Apart as bench/run.sh's latency reps are (it waits for an empty
         * queue, polling every 50 ms): the kernel makes the first
         * migration after a quiet moment wait for an RCU grace period. */
        usleep(100 * 1000);
        double t0 = realtime();
        char *client[] = {"true", NULL};
        pid_t pid;
        int status, pipefd[2];
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, client, environ) != 0)
            die("posix_spawn");
        waitpid(pid, &status, 0);
        make_groups(rep);
        if (pipe(pipefd) != 0)
            die("pipe");
        pid = fork_job(rep, pipefd[1], into);
        close(pipefd[1]);
        char text[64] = {0};
        ssize_t got = read(pipefd[0], text, sizeof text - 1);
        close(pipefd[0]);
        waitpid(pid, &status, 0);
        remove_groups(rep);
        if (got <= 0)
            die("the job printed no time");
        took[rep] = atof(text) - t0;
    }
    qsort(took, reps, sizeof *took, by_value);
    printf("%.6f\n", took[reps / 2]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: floor_jobs N SLOTS [CGROUP_ROOT]\n");
        return 2;
    }
    int lat = strcmp(argv[1], "lat") == 0;
    int n = atoi(argv[lat ? 2 : 1]), nslots = lat ? 1 : atoi(argv[2]);
    const char *root = argc > 3 ? argv[3] : "/sys/fs/cgroup";
    int into = lat && argc > 4 && strcmp(argv[4], "clone3") == 0;
    char probe[512];
    snprintf(probe, sizeof probe, "%s/cgroup.controllers", root);
    int v2 = access(probe, F_OK) == 0;
    if (v2) {
        /* cgroup2: one group per job under a parent with the controllers. */
        snprintf(parents[0], sizeof parents[0], "%s/ysched_floor", root);
        mkdir(parents[0], 0755);
        char control[600];
        snprintf(control, sizeof control, "%s/cgroup.subtree_control", parents[0]);
        int fd = open(control, O_WRONLY);
        if (fd >= 0) {
            const char *want[] = {"+memory", "+pids", "+cpu"};
            for (int i = 0; i < 3; i++)
                if (write(fd, want[i], strlen(want[i])) < 0) {
                    /* Not delegated here: the group goes without it. */
                }
            close(fd);
        }
        nparents = 1;
    } else {
        for (int i = 0; i < 5; i++) {
            snprintf(probe, sizeof probe, "%s/%s/cgroup.procs", root, v1[i]);
            if (access(probe, F_OK) != 0)
                continue;
            snprintf(parents[nparents], sizeof parents[0], "%s/%s/ysched_floor", root, v1[i]);
            mkdir(parents[nparents], 0755);
            nparents++;
        }
    }
    /* `lat REPS none`: the same without cgroups, to set beside them. */
    if (nparents == 0 && !(lat && strcmp(root, "none") == 0)) {
        fprintf(stderr, "floor_jobs: no cgroup hierarchy under %s\n", root);
        return 1;
    }
    if (into && !v2) {
        fprintf(stderr, "floor_jobs: clone3 into a cgroup needs cgroup2 at %s\n", root);
        return 1;
    }
    if (lat) {
        int rc = latency(n, into);
        for (int p = 0; p < nparents; p++)
            rmdir(parents[p]);
        return rc;
    }
    struct slot *slots = calloc(nslots, sizeof *slots);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int job = 0; job < n; job++) {
        char *client[] = {"true", NULL};
        pid_t pid;
        int status;
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, client, environ) != 0)
            die("posix_spawn");
        waitpid(pid, &status, 0);
        int free_slot = -1;
        for (;;) {
            for (int i = 0; i < nslots && free_slot < 0; i++)
                if (slots[i].pid == 0)
                    free_slot = i;
            if (free_slot >= 0)
                break;
            reap_one(slots, nslots);
        }
        start_job(&slots[free_slot], job);
    }
    for (int i = 0; i < nslots; i++)
        if (slots[i].pid != 0)
            reap_one(slots, nslots);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int p = 0; p < nparents; p++)
        rmdir(parents[p]);
    printf("%.3f\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
