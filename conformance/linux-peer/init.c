/*
 * /init of the Linux peer: a stock Debian kernel that clockhal-matrix boots
 * in the same QEMU configuration as clockhal's conformance kernel, to show
 * which clocksource Linux picks there and what a process pays to read it.
 *
 * As PID 1 it
 *   1. waits until the kernel's boot-time clocksource choice has settled,
 *   2. reports that choice, the available clocksources and the CPU's TSC flags,
 *   3. measures clock_gettime(CLOCK_MONOTONIC) through glibc (the vDSO, which
 *      itself makes the syscall for sources without a vDSO mode such as hpet
 *      and acpi_pm) on every available clocksource,
 *   4. hands the choice back to the kernel and reports what it picks then
 *      (the clocksource watchdog may have demoted a source meanwhile),
 *   5. prints the kernel's clock messages and leaves QEMU through
 *      isa-debug-exit (power-off if that device is missing).
 *
 * Every result is one line "LINUX-PEER <kind> key=value ..." (README.md);
 * conformance/runner/src/linux_peer/output.rs parses them.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -static -o init init.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/klog.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_VERSION 1
#define CS_DIR "/sys/devices/system/clocksource/clocksource0/"

/* Settling: "tsc-early" is a placeholder that Linux replaces once the
 * refined TSC calibration has run (about 1 s after the clocksource
 * initcall); the extra time gives the clocksource watchdog (0.5 s period)
 * a few rounds to verify or reject the TSC before we look. */
#define SETTLE_MIN_MS 2500
#define SETTLE_MAX_MS 20000

/* Cost: best of BATCHES batches of about BATCH_NS each. */
#define BATCHES 5
#define BATCH_NS 40000000.0
#define MIN_CALLS 64L
#define MAX_CALLS 2000000L

/* isa-debug-exit (configs.rs COMMON_ARGS): QEMU exits with (value << 1) | 1. */
#define DEBUG_EXIT_PORT 0xf4
#define DEBUG_EXIT_OK 0x10
#define DEBUG_EXIT_FAIL 0x11

static volatile uint64_t sink;

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void leave(int ok)
{
	fflush(stdout);
	/* Let the UART send everything before QEMU goes away. */
	tcdrain(STDOUT_FILENO);
	sync();
	if (ioperm(DEBUG_EXIT_PORT, 1, 1) == 0)
		outb(ok ? DEBUG_EXIT_OK : DEBUG_EXIT_FAIL, DEBUG_EXIT_PORT);
	reboot(RB_POWER_OFF);
	for (;;)
		pause();
}

static void fail(const char *what)
{
	printf("LINUX-PEER error what=%s errno=%d\n", what, errno);
	leave(0);
}

/* Reads a sysfs/procfs file into buf with trailing whitespace removed. */
static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, len - 1);
	close(fd);
	if (r < 0)
		return -1;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
		r--;
	buf[r] = 0;
	return 0;
}

static int write_text(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	ssize_t r = write(fd, s, strlen(s));
	int e = errno;
	close(fd);
	return r < 0 ? -e : 0;
}

static void current_clocksource(char *buf, size_t len)
{
	if (read_text(CS_DIR "current_clocksource", buf, len) < 0)
		fail("read-current_clocksource");
}

/* available_clocksource is space-separated; the report uses commas so that
 * every value is one token. */
static void available_clocksources(char *buf, size_t len)
{
	if (read_text(CS_DIR "available_clocksource", buf, len) < 0)
		fail("read-available_clocksource");
	for (char *p = buf; *p; p++)
		if (*p == ' ')
			*p = ',';
}

static void mount_or_fail(const char *src, const char *dir, const char *type)
{
	mkdir(dir, 0755);
	if (mount(src, dir, type, 0, NULL) != 0 && errno != EBUSY)
		fail(type);
}

static void setup_console(void)
{
	mount_or_fail("proc", "/proc", "proc");
	mount_or_fail("sysfs", "/sys", "sysfs");
	mount_or_fail("devtmpfs", "/dev", "devtmpfs");
	/* The kernel opens /dev/console for init when the initramfs has it;
	 * otherwise open it now that devtmpfs is mounted. */
	if (fcntl(1, F_GETFD) < 0) {
		int fd = open("/dev/console", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* From here on kernel messages stay in the log buffer (report_klog
	 * prints the clock ones), so none can split a report line. */
	klogctl(8 /* SYSLOG_ACTION_CONSOLE_LEVEL */, NULL, 1);
}

static void settle(char *cur, size_t len)
{
	for (;;) {
		current_clocksource(cur, len);
		uint64_t up_ms = clock_ns(CLOCK_BOOTTIME) / 1000000u;
		if ((strcmp(cur, "tsc-early") != 0 && up_ms >= SETTLE_MIN_MS) ||
		    up_ms >= SETTLE_MAX_MS)
			return;
		sleep_ms(100);
	}
}

static int has_flag(const char *flags, const char *want)
{
	size_t n = strlen(want);
	for (const char *p = flags; (p = strstr(p, want)) != NULL; p += n)
		if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0 || p[n] == '\n'))
			return 1;
	return 0;
}

/* The value of the first "key\t: value" line of /proc/cpuinfo, as one token. */
static void cpuinfo_value(const char *info, const char *key, char *out, size_t len)
{
	snprintf(out, len, "?");
	const char *p = strstr(info, key);
	if (!p || !(p = strchr(p, ':')))
		return;
	p += strspn(p, ": \t");
	size_t n = strcspn(p, " \n");
	if (n >= len)
		n = len - 1;
	memcpy(out, p, n);
	out[n] = 0;
}

/* The TSC facts Linux's clocksource ratings depend on (first CPU); the
 * vendor matters too: Linux deems a non-Intel TSC without constant_tsc
 * unsynchronized on more than one CPU. */
static void report_cpu(void)
{
	static char info[1 << 16];
	if (read_text("/proc/cpuinfo", info, sizeof(info)) < 0)
		fail("read-cpuinfo");
	char vendor[64];
	cpuinfo_value(info, "vendor_id", vendor, sizeof(vendor));
	const char *flags = strstr(info, "\nflags");
	if (!flags)
		fail("cpuinfo-flags");
	const char *eol = strchr(flags + 1, '\n');
	char line[8192];
	size_t l = eol ? (size_t)(eol - flags) : strlen(flags);
	if (l >= sizeof(line))
		l = sizeof(line) - 1;
	memcpy(line, flags, l);
	line[l] = 0;
	static const char *const want[] = { "tsc", "constant_tsc", "nonstop_tsc",
		"tsc_known_freq", "tsc_reliable", "hypervisor", NULL };
	printf("LINUX-PEER cpu cpus=%ld vendor=%s", sysconf(_SC_NPROCESSORS_ONLN), vendor);
	for (int i = 0; want[i]; i++)
		printf(" %s=%d", want[i], has_flag(line, want[i]));
	printf("\n");
}

static void read_loop(long n)
{
	struct timespec ts;
	uint64_t acc = 0;
	for (long i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		acc += (uint64_t)ts.tv_nsec;
	}
	sink = acc;
}

/* ns per clock_gettime(CLOCK_MONOTONIC) on the current clocksource: size a
 * batch to ~BATCH_NS (trapping sources cost microseconds under TCG), then
 * keep the best of BATCHES (least disturbed by the host). */
static void report_cost(const char *source)
{
	long n = MIN_CALLS;
	double per_call = 0;
	for (;;) {
		uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
		read_loop(n);
		uint64_t dt = clock_ns(CLOCK_MONOTONIC) - t0;
		per_call = (double)dt / (double)n;
		if (dt >= BATCH_NS / 8 || n >= MAX_CALLS)
			break;
		n *= 2;
	}
	if (per_call > 0 && BATCH_NS / per_call < (double)MAX_CALLS)
		n = (long)(BATCH_NS / per_call);
	else
		n = MAX_CALLS;
	if (n < MIN_CALLS)
		n = MIN_CALLS;
	double best = 1e300;
	for (int b = 0; b < BATCHES; b++) {
		uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
		read_loop(n);
		double ns = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / (double)n;
		if (ns < best)
			best = ns;
	}
	printf("LINUX-PEER cost source=%s ns=%.1f calls=%ld batches=%d\n",
	       source, best, n, BATCHES);
}

/* Measures `source`, switching to it first unless it is already current. */
static void measure(const char *source, const char *chosen)
{
	if (strcmp(source, chosen) != 0) {
		int rc = write_text(CS_DIR "current_clocksource", source);
		/* The vDSO follows at the next timekeeping update (one tick). */
		sleep_ms(50);
		char now[128];
		current_clocksource(now, sizeof(now));
		if (rc != 0 || strcmp(now, source) != 0) {
			printf("LINUX-PEER nocost source=%s reason=switch-refused errno=%d current=%s\n",
			       source, -rc, now);
			return;
		}
	}
	report_cost(source);
}

static int is_clock_message(const char *line)
{
	static const char *const keys[] = { "clocksource", "Clocksource", "tsc:",
		"TSC", "hpet", "HPET", "PM-Timer", "kvm-clock", "unstable",
		"Linux version", NULL };
	for (int i = 0; keys[i]; i++)
		if (strstr(line, keys[i]))
			return 1;
	return 0;
}

/* The kernel's clock-related messages, from its log buffer. */
static void report_klog(void)
{
	int len = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	if (len <= 0)
		len = 1 << 20;
	char *buf = malloc((size_t)len + 1);
	if (!buf)
		return;
	int r = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, len);
	if (r < 0) {
		free(buf);
		return;
	}
	buf[r] = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '<') {  /* "<6>" level prefix */
			char *e = strchr(line, '>');
			if (e)
				line = e + 1;
		}
		if (is_clock_message(line))
			printf("LINUX-PEER klog %.200s\n", line);
	}
	free(buf);
}

int main(void)
{
	if (getpid() != 1) {
		fprintf(stderr, "linux-peer init: runs only as PID 1 of the peer guest\n");
		return 2;
	}
	setup_console();

	struct utsname u;
	uname(&u);
	printf("LINUX-PEER begin version=%d kernel=%s\n", FORMAT_VERSION, u.release);

	char chosen[128], avail[1024];
	settle(chosen, sizeof(chosen));
	available_clocksources(avail, sizeof(avail));
	printf("LINUX-PEER boot current=%s available=%s uptime_ms=%llu\n", chosen,
	       avail, (unsigned long long)(clock_ns(CLOCK_BOOTTIME) / 1000000u));
	report_cpu();

	/* Linux's own pick first, untouched; then every other source. */
	measure(chosen, chosen);
	char list[1024];
	strcpy(list, avail);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
		if (strcmp(s, chosen) != 0)
			measure(s, chosen);

	/* An empty name clears the override: the kernel picks again. */
	int rc = write_text(CS_DIR "current_clocksource", "\n");
	sleep_ms(100);
	char end[128];
	current_clocksource(end, sizeof(end));
	available_clocksources(avail, sizeof(avail));
	printf("LINUX-PEER end current=%s available=%s override_cleared=%d\n", end,
	       avail, rc == 0);

	report_klog();
	printf("LINUX-PEER done\n");
	leave(1);
}
