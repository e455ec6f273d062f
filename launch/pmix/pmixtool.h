/* The C side of the PMIx tool: thin wrappers over libpmix's tool API for tool.go. */
#ifndef HPCDAP_PMIXTOOL_H
#define HPCDAP_PMIXTOOL_H

#include <stddef.h>
#include <stdint.h>

/* hp_proc is one proc-table entry; strings are malloc'd. */
typedef struct {
	uint32_t rank;
	int pid;
	char *host;
	char *exe;
	int state; /* pmix_proc_state_t */
} hp_proc;

int hp_tool_init(int attach_pid, char *nspace, size_t nslen, uint32_t *rank);
int hp_tool_finalize(void);
int hp_get_string(const char *nspace, uint32_t rank, const char *key, char **out);
int hp_register(int code);
int hp_spawn_launcher(const char *cmd, char **argv, char **env, const char *cwd,
                      const char *hold, const char *uri, char *nspace, size_t nslen);
int hp_set_server(const char *nspace);
int hp_release(const char *nspace, uint32_t rank);
int hp_proctable(const char *nspace, hp_proc **procs, size_t *nprocs);
void hp_free_procs(hp_proc *procs, size_t n);
int hp_namespaces(const char *qualifier, char **out);
int hp_signal(const char *nspace, int sig);
const char *hp_error_string(int status);
const char *hp_version(void);
int hp_iof_pull(const char *nspace);
int hp_query_string(const char *key, char **out);
int hp_spawn_daemons(const char *cmd, char **argv, char **env, const char *cwd, const char *target,
                     char *nspace, size_t nslen);
int hp_daemon_procs(char *target, size_t tlen, hp_proc **procs, size_t *nprocs);

#endif
