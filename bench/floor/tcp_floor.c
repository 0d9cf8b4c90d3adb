// The least CPU a client can spend on one DNS query per TCP connection, at a fixed rate, on
// this machine: what the kernel's connection setup and teardown and one wake-up per tick cost,
// with no load generator around it. Two ways, both timing answers exactly:
//
//   blocking: socket, connect, write, read (the thread sleeps until the answer), close;
//   lazy:     socket, non-blocking connect and write; every tick reads (non-blocking) the
//             connections still waiting and closes those answered: no wake-up for answers
//             (their time would come from the kernel's receive stamp, SO_TIMESTAMPNS, which
//             is exact here: one answer per connection).
//
// Usage: tcp_floor blocking|lazy PORT RATE SECONDS. Prints "answered N of M, X us CPU per
// connection" (user + system CPU of the whole process over the number of connections).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// www.example.test A, ID 0x1234, RD, with its 2-byte length prefix (RFC 7766).
static const unsigned char QUERY[] = {0, 33, 0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0,
                                      3, 'w', 'w', 'w', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e',
                                      4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};

static int open_conn(const struct sockaddr_in *a, int nonblocking) {
    int s = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
    if (s < 0) return -1;
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (nonblocking) setsockopt(s, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    if (connect(s, (const struct sockaddr *)a, sizeof *a) != 0 && errno != EINPROGRESS) {
        close(s);
        return -1;
    }
    if (write(s, QUERY, sizeof QUERY) != (ssize_t)sizeof QUERY) {
        close(s);
        return -1;
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "blocking") && strcmp(argv[1], "lazy"))) {
        fprintf(stderr, "usage: tcp_floor blocking|lazy PORT RATE SECONDS\n");
        return 2;
    }
    int lazy = !strcmp(argv[1], "lazy");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    long rate = atol(argv[3]), n = rate * atol(argv[4]), step = 1000000000L / rate, ok = 0;
    static int pending[65536];
    int np = 0;
    unsigned char buf[512];
    char cmsg[256];
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (long i = 0; i <= n; i++) {
        next.tv_nsec += step;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        if (lazy) {
            int kept = 0;
            for (int k = 0; k < np; k++) {
                struct iovec iov = {buf, sizeof buf};
                struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cmsg, .msg_controllen = sizeof cmsg};
                ssize_t r = recvmsg(pending[k], &m, MSG_DONTWAIT);
                if (r < 0 && errno == EAGAIN && kept < 65536) {
                    pending[kept++] = pending[k];
                    continue;
                }
                ok += r > 2;
                close(pending[k]);
            }
            np = kept;
        }
        if (i == n) break;
        int s = open_conn(&a, lazy);
        if (s < 0) continue;
        if (lazy) {
            pending[np++] = s;
        } else {
            ok += read(s, buf, sizeof buf) > 2;
            close(s);
        }
    }
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    double cpu = u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
    printf("answered %ld of %ld, %.1f us CPU per connection\n", ok, n, cpu * 1e6 / n);
    return 0;
}
