/* The real node's pod sandbox process (containerd's sandbox image): hold the pod's namespaces open,
 * reap orphaned children, exit on SIGINT/SIGTERM. Built with `gcc -static` by migops.local.images,
 * because no registry (registry.k8s.io/pause) is reachable. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction term = {.sa_handler = quit}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &term, 0);
    sigaction(SIGTERM, &term, 0);
    sigaction(SIGCHLD, &child, 0);
    for (;;) pause();
}
