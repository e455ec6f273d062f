//go:build cgo && pmix

/* The C side of the PMIx tool: libpmix's macros and static inlines cannot be called from Go,
 * and event handlers need a C function pointer. Everything here is a blocking call. */
#define _GNU_SOURCE
#include <pmix_tool.h>
#include <stdlib.h>
#include <string.h>

#include "pmixtool.h"
#include "_cgo_export.h"

static pmix_proc_t me;

int hp_tool_init(int attach_pid, char *nspace, size_t nslen, uint32_t *rank)
{
	pmix_info_t *info;
	size_t n = 0;
	pmix_status_t rc;
	bool t = true;
	pid_t pid = attach_pid;

	PMIX_INFO_CREATE(info, 3);
	if (attach_pid > 0) {
		PMIX_INFO_LOAD(&info[n], PMIX_SERVER_PIDINFO, &pid, PMIX_PID);
		n++;
	} else {
		PMIX_INFO_LOAD(&info[n], PMIX_TOOL_DO_NOT_CONNECT, &t, PMIX_BOOL);
		n++;
		PMIX_INFO_LOAD(&info[n], PMIX_LAUNCHER, &t, PMIX_BOOL);
		n++;
	}
	PMIX_INFO_LOAD(&info[n], PMIX_IOF_LOCAL_OUTPUT, &t, PMIX_BOOL);
	n++;
	rc = PMIx_tool_init(&me, info, n);
	PMIX_INFO_FREE(info, 3);
	if (rc == PMIX_SUCCESS) {
		strncpy(nspace, me.nspace, nslen - 1);
		nspace[nslen - 1] = 0;
		*rank = me.rank;
	}
	return rc;
}

int hp_tool_finalize(void)
{
	return PMIx_tool_finalize();
}

int hp_get_string(const char *nspace, uint32_t rank, const char *key, char **out)
{
	pmix_proc_t p;
	pmix_value_t *val = NULL;
	pmix_status_t rc;

	PMIX_LOAD_PROCID(&p, nspace, rank);
	rc = PMIx_Get(&p, key, NULL, 0, &val);
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	if (val->type != PMIX_STRING || val->data.string == NULL) {
		PMIX_VALUE_RELEASE(val);
		return PMIX_ERR_TYPE_MISMATCH;
	}
	*out = strdup(val->data.string);
	PMIX_VALUE_RELEASE(val);
	return PMIX_SUCCESS;
}

/* evhandler runs on libpmix's progress thread: it hands what it found to Go, which does not
 * block, and completes the event. */
static void evhandler(size_t id, pmix_status_t status, const pmix_proc_t *source,
                      pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                      pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
	char *nspace = NULL, *affected = NULL, *breakpoint = NULL, *message = NULL;
	int exitcode = 0, haveexit = 0, term = 0, haveterm = 0;
	uint32_t affrank = PMIX_RANK_WILDCARD;
	size_t i;

	for (i = 0; i < ninfo; i++) {
		pmix_value_t *v = &info[i].value;
		if (PMIX_CHECK_KEY(&info[i], PMIX_NSPACE) && v->type == PMIX_STRING) {
			nspace = v->data.string;
		} else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && v->type == PMIX_PROC &&
		           v->data.proc != NULL) {
			affected = v->data.proc->nspace;
			affrank = v->data.proc->rank;
		} else if (PMIX_CHECK_KEY(&info[i], PMIX_BREAKPOINT) && v->type == PMIX_STRING) {
			breakpoint = v->data.string;
		} else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_TEXT_MESSAGE) && v->type == PMIX_STRING) {
			message = v->data.string;
		} else if (PMIX_CHECK_KEY(&info[i], PMIX_EXIT_CODE)) {
			if (v->type == PMIX_INT) {
				exitcode = v->data.integer, haveexit = 1;
			} else if (v->type == PMIX_INT32) {
				exitcode = v->data.int32, haveexit = 1;
			}
		} else if (PMIX_CHECK_KEY(&info[i], PMIX_JOB_TERM_STATUS)) {
			if (v->type == PMIX_STATUS) {
				term = v->data.status, haveterm = 1;
			} else if (v->type == PMIX_INT) {
				term = v->data.integer, haveterm = 1;
			}
		}
	}
	goPMIxEvent(status, source ? (char *) source->nspace : NULL, source ? source->rank : 0,
	            nspace, affected, affrank, breakpoint, message, exitcode, haveexit, term, haveterm);
	if (cbfunc != NULL) {
		cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
	}
}

int hp_register(int code)
{
	pmix_status_t codes[1] = {code};
	/* Without a registration callback the call blocks and returns the handler id or an error. */
	int rc = PMIx_Register_event_handler(codes, 1, NULL, 0, evhandler, NULL, NULL);
	return rc < 0 ? rc : PMIX_SUCCESS;
}

static char **argv_copy(char **a)
{
	size_t n = 0, i;
	char **c;

	while (a != NULL && a[n] != NULL) {
		n++;
	}
	c = calloc(n + 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		c[i] = strdup(a[i]);
	}
	return c;
}

int hp_spawn_launcher(const char *cmd, char **argv, char **env, const char *cwd,
                      const char *hold, const char *uri, char *nspace, size_t nslen)
{
	pmix_app_t *app;
	pmix_info_t *jinfo, *dirs;
	pmix_data_array_t darray;
	pmix_nspace_t ns;
	pmix_status_t rc;
	size_t nenv = 0, ndirs = 0;
	bool t = true;

	PMIX_APP_CREATE(app, 1);
	app->cmd = strdup(cmd);
	app->argv = argv_copy(argv);
	while (env[nenv] != NULL) {
		nenv++;
	}
	app->env = calloc(nenv + 2, sizeof(char *));
	for (size_t i = 0; i < nenv; i++) {
		app->env[i] = strdup(env[i]);
	}
	/* The launcher calls back to this tool during its init and waits for its release. */
	if (asprintf(&app->env[nenv], "PMIX_LAUNCHER_RNDZ_URI=%s", uri) < 0) {
		PMIX_APP_FREE(app, 1);
		return PMIX_ERR_NOMEM;
	}
	if (cwd != NULL && cwd[0] != 0) {
		app->cwd = strdup(cwd);
	}
	app->maxprocs = 1;

	/* Directives the launcher applies to the job it starts. */
	PMIX_INFO_CREATE(dirs, 4);
	if (strcmp(hold, "exec") == 0) {
		PMIX_INFO_LOAD(&dirs[ndirs], PMIX_DEBUG_STOP_ON_EXEC, &t, PMIX_BOOL);
		ndirs++;
	} else if (strcmp(hold, "init") == 0) {
		PMIX_INFO_LOAD(&dirs[ndirs], PMIX_DEBUG_STOP_IN_INIT, &t, PMIX_BOOL);
		ndirs++;
	}
	PMIX_INFO_LOAD(&dirs[ndirs], PMIX_NOTIFY_JOB_EVENTS, &t, PMIX_BOOL);
	ndirs++;
	/* No PMIX_FWD_STDOUT/STDERR: with them the launcher also writes each line, unlabelled, to
	 * its own stdout; hp_iof_pull gets the output with its sources. */
	darray.type = PMIX_INFO;
	darray.size = ndirs;
	darray.array = dirs;
	PMIX_INFO_CREATE(jinfo, 1);
	PMIX_INFO_LOAD(&jinfo[0], PMIX_LAUNCH_DIRECTIVES, &darray, PMIX_DATA_ARRAY);

	rc = PMIx_Spawn(jinfo, 1, app, 1, ns);
	PMIX_INFO_FREE(jinfo, 1);
	PMIX_INFO_FREE(dirs, 4);
	PMIX_APP_FREE(app, 1);
	if (rc == PMIX_SUCCESS) {
		strncpy(nspace, ns, nslen - 1);
		nspace[nslen - 1] = 0;
	}
	return rc;
}

/* hp_set_server makes the launcher nspace (rank 0) this tool's server if it has called back,
 * and answers PMIX_ERR_UNREACH at once if it has not: without PMIX_WAIT_FOR_CONNECTION, with
 * which libpmix would look for it only every quarter of a second. */
int hp_set_server(const char *nspace)
{
	pmix_proc_t p;

	PMIX_LOAD_PROCID(&p, nspace, 0);
	return PMIx_tool_set_server(&p, NULL, 0);
}

int hp_release(const char *nspace, uint32_t rank)
{
	pmix_proc_t target;
	pmix_info_t *info;
	pmix_status_t rc;
	bool t = true;

	PMIX_LOAD_PROCID(&target, nspace, rank);
	PMIX_INFO_CREATE(info, 2);
	PMIX_INFO_LOAD(&info[0], PMIX_EVENT_NON_DEFAULT, &t, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_EVENT_CUSTOM_RANGE, &target, PMIX_PROC);
	rc = PMIx_Notify_event(PMIX_DEBUGGER_RELEASE, &me, PMIX_RANGE_CUSTOM, info, 2, NULL, NULL);
	PMIX_INFO_FREE(info, 2);
	return rc;
}

/* query runs one query for key with an optional PMIX_NSPACE qualifier. */
static int query(const char *key, const char *nspace, pmix_info_t **results, size_t *nresults)
{
	pmix_query_t *q;
	pmix_status_t rc;

	PMIX_QUERY_CREATE(q, 1);
	q->keys = calloc(2, sizeof(char *));
	q->keys[0] = strdup(key);
	if (nspace != NULL && nspace[0] != 0) {
		PMIX_INFO_CREATE(q->qualifiers, 1);
		q->nqual = 1;
		PMIX_INFO_LOAD(&q->qualifiers[0], PMIX_NSPACE, nspace, PMIX_STRING);
	}
	rc = PMIx_Query_info(q, 1, results, nresults);
	PMIX_QUERY_FREE(q, 1);
	return rc;
}

/* proctable reads the proc table key (global or local) of nspace. */
static int proctable(const char *key, const char *nspace, hp_proc **procs, size_t *nprocs)
{
	pmix_info_t *res = NULL;
	size_t nres = 0, i;
	pmix_status_t rc;

	*procs = NULL;
	*nprocs = 0;
	rc = query(key, nspace, &res, &nres);
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	rc = PMIX_ERR_NOT_FOUND;
	for (i = 0; i < nres; i++) {
		pmix_data_array_t *d;
		pmix_proc_info_t *pi;
		size_t j;

		if (!PMIX_CHECK_KEY(&res[i], key) || res[i].value.type != PMIX_DATA_ARRAY) {
			continue;
		}
		d = res[i].value.data.darray;
		if (d == NULL || d->type != PMIX_PROC_INFO) {
			rc = PMIX_ERR_TYPE_MISMATCH;
			break;
		}
		pi = (pmix_proc_info_t *) d->array;
		*procs = calloc(d->size ? d->size : 1, sizeof(hp_proc));
		*nprocs = d->size;
		for (j = 0; j < d->size; j++) {
			(*procs)[j].rank = pi[j].proc.rank;
			(*procs)[j].pid = pi[j].pid;
			(*procs)[j].host = strdup(pi[j].hostname ? pi[j].hostname : "");
			(*procs)[j].exe = strdup(pi[j].executable_name ? pi[j].executable_name : "");
			(*procs)[j].state = pi[j].state;
		}
		rc = PMIX_SUCCESS;
		break;
	}
	PMIX_INFO_FREE(res, nres);
	return rc;
}

int hp_proctable(const char *nspace, hp_proc **procs, size_t *nprocs)
{
	return proctable(PMIX_QUERY_PROC_TABLE, nspace, procs, nprocs);
}

void hp_free_procs(hp_proc *procs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(procs[i].host);
		free(procs[i].exe);
	}
	free(procs);
}

int hp_namespaces(const char *qualifier, char **out)
{
	pmix_info_t *res = NULL;
	size_t nres = 0, i;
	pmix_status_t rc;

	rc = query(PMIX_QUERY_NAMESPACES, qualifier, &res, &nres);
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	rc = PMIX_ERR_NOT_FOUND;
	for (i = 0; i < nres; i++) {
		if (PMIX_CHECK_KEY(&res[i], PMIX_QUERY_NAMESPACES) && res[i].value.type == PMIX_STRING) {
			*out = strdup(res[i].value.data.string ? res[i].value.data.string : "");
			rc = PMIX_SUCCESS;
			break;
		}
	}
	PMIX_INFO_FREE(res, nres);
	return rc;
}

int hp_signal(const char *nspace, int sig)
{
	pmix_proc_t target;
	pmix_info_t *info;
	pmix_status_t rc;

	PMIX_LOAD_PROCID(&target, nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_CREATE(info, 1);
	/* Also for SIGKILL: after PMIX_JOB_CTRL_KILL PRRTE reports the job's status as 0. */
	PMIX_INFO_LOAD(&info[0], PMIX_JOB_CTRL_SIGNAL, &sig, PMIX_INT);
	rc = PMIx_Job_control(&target, 1, info, 1, NULL, NULL);
	PMIX_INFO_FREE(info, 1);
	return rc;
}

const char *hp_error_string(int status)
{
	return PMIx_Error_string(status);
}

const char *hp_version(void)
{
	return PMIx_Get_version();
}

/* iofhandler runs on libpmix's progress thread with output of one process of the job. */
static void iofhandler(size_t id, pmix_iof_channel_t channel, pmix_proc_t *source,
                       pmix_byte_object_t *payload, pmix_info_t info[], size_t ninfo)
{
	if (payload == NULL || payload->bytes == NULL || payload->size == 0) {
		return;
	}
	goPMIxOutput(channel == PMIX_FWD_STDERR_CHANNEL ? 2 : 1, source ? source->nspace : NULL,
	             source ? source->rank : 0, payload->bytes, payload->size);
}

int hp_iof_pull(const char *nspace)
{
	pmix_proc_t p;
	int rc;

	pmix_info_t *info;
	bool t = true;

	PMIX_LOAD_PROCID(&p, nspace, PMIX_RANK_WILDCARD);
	/* Intercept the output: it is written only here, labelled. */
	PMIX_INFO_CREATE(info, 1);
	PMIX_INFO_LOAD(&info[0], PMIX_IOF_REDIRECT, &t, PMIX_BOOL);
	/* Without a registration callback the call blocks and returns the request id or an error. */
	rc = PMIx_IOF_pull(&p, 1, info, 1, PMIX_FWD_STDOUT_CHANNEL | PMIX_FWD_STDERR_CHANNEL,
	                   iofhandler, NULL, NULL);
	PMIX_INFO_FREE(info, 1);
	return rc < 0 ? rc : PMIX_SUCCESS;
}

/* hp_query_string answers a query for key without qualifiers whose answer is a string (the
 * comma-separated attributes of PMIX_QUERY_SPAWN_SUPPORT, PMIX_QUERY_DEBUG_SUPPORT). */
int hp_query_string(const char *key, char **out)
{
	pmix_info_t *res = NULL;
	size_t nres = 0, i;
	pmix_status_t rc;

	rc = query(key, NULL, &res, &nres);
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	rc = PMIX_ERR_NOT_FOUND;
	for (i = 0; i < nres; i++) {
		if (PMIX_CHECK_KEY(&res[i], key) && res[i].value.type == PMIX_STRING) {
			*out = strdup(res[i].value.data.string ? res[i].value.data.string : "");
			rc = PMIX_SUCCESS;
			break;
		}
	}
	PMIX_INFO_FREE(res, nres);
	return rc;
}

/* hp_spawn_daemons asks the server to start cmd as debugger daemons of the job target, one on
 * each node of the job, and to report their job's end. */
int hp_spawn_daemons(const char *cmd, char **argv, char **env, const char *cwd, const char *target,
                     char *nspace, size_t nslen)
{
	pmix_app_t *app;
	pmix_info_t *info;
	pmix_proc_t tgt;
	pmix_nspace_t ns;
	pmix_status_t rc;
	uint16_t per = 1;
	bool t = true;

	PMIX_APP_CREATE(app, 1);
	app->cmd = strdup(cmd);
	app->argv = argv_copy(argv);
	app->env = argv_copy(env);
	if (cwd != NULL && cwd[0] != 0) {
		app->cwd = strdup(cwd);
	}
	app->maxprocs = 0;
	PMIX_LOAD_PROCID(&tgt, target, PMIX_RANK_WILDCARD);
	PMIX_INFO_CREATE(info, 4);
	PMIX_INFO_LOAD(&info[0], PMIX_DEBUGGER_DAEMONS, &t, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_DEBUG_TARGET, &tgt, PMIX_PROC);
	PMIX_INFO_LOAD(&info[2], PMIX_DEBUG_DAEMONS_PER_NODE, &per, PMIX_UINT16);
	PMIX_INFO_LOAD(&info[3], PMIX_NOTIFY_COMPLETION, &t, PMIX_BOOL);
	rc = PMIx_Spawn(info, 4, app, 1, ns);
	PMIX_INFO_FREE(info, 4);
	PMIX_APP_FREE(app, 1);
	if (rc == PMIX_SUCCESS) {
		strncpy(nspace, ns, nslen - 1);
		nspace[nslen - 1] = 0;
	}
	return rc;
}

/* hp_daemon_procs runs in a debugger daemon the launcher started: it connects to the local
 * server with the connection information the launcher gave it, reads the job it is to debug
 * (PMIX_DEBUG_TARGET) and that job's processes on this node, and disconnects. */
int hp_daemon_procs(char *target, size_t tlen, hp_proc **procs, size_t *nprocs)
{
	pmix_proc_t p;
	pmix_value_t *val = NULL;
	pmix_status_t rc;

	*procs = NULL;
	*nprocs = 0;
	rc = PMIx_tool_init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		return rc;
	}
	PMIX_LOAD_PROCID(&p, me.nspace, PMIX_RANK_WILDCARD);
	rc = PMIx_Get(&p, PMIX_DEBUG_TARGET, NULL, 0, &val);
	if (rc == PMIX_SUCCESS) {
		if (val->type == PMIX_PROC && val->data.proc != NULL) {
			strncpy(target, val->data.proc->nspace, tlen - 1);
			target[tlen - 1] = 0;
		} else {
			rc = PMIX_ERR_TYPE_MISMATCH;
		}
		PMIX_VALUE_RELEASE(val);
	}
	if (rc == PMIX_SUCCESS) {
		rc = proctable(PMIX_QUERY_LOCAL_PROC_TABLE, target, procs, nprocs);
	}
	PMIx_tool_finalize();
	return rc;
}
