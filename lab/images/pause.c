/*
 * The lab's pod sandbox process: holds the pod's namespaces open until the
 * runtime stops it. Blocks in pause(), reaps every child that is reparented
 * to it (it is PID 1 of the pod's PID namespace when that is shared), and
 * exits 0 on SIGINT or SIGTERM. Built with `gcc -static -O2` by
 * lab/images/build into the image named PAUSE_IMAGE in names.env.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAUSE_VERSION "3.10-ghostip-lab"

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  int saved = errno;
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static int handle(int sig, void (*fn)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    printf("pause %s\n", PAUSE_VERSION);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "pause: usage: pause [-v]\n");
    return 2;
  }
  if (getpid() != 1) {
    /* Not an error: the runtime may not give the sandbox its own PID
     * namespace, and a test may run it directly. */
    fprintf(stderr, "pause: warning: not running as PID 1\n");
  }
  if (handle(SIGINT, on_stop, 0) < 0 || handle(SIGTERM, on_stop, 0) < 0 ||
      handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
