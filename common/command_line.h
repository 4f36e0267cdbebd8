/* command_line.h — the process's original command line, so the front's pool can start each
 * worker as
 *   attnd-worker --device DEVICE --ipc-fd 3 <argv[1..argc-1] of the front>
 * and workers read the same settings as the front. Valid from the start of main() on;
 * never freed. */
#ifndef COMMAND_LINE_H
#define COMMAND_LINE_H

/* argv as main() received it (argv[0] included, NULL-terminated) and its count; NULL and
 * 0 before main_set_original_argv. Defined in settings.c, not main.c, so that every object
 * but main.o links into the unit tests. */
char *const *main_original_argv(void);
int main_original_argc(void);

/* Called first thing in main(). argv must live until exit (main's own argv does). */
void main_set_original_argv(int argc, char **argv);

#endif
