/* The second compile unit of scopes.c: a static and a global of the program. */
static int other_static = 7;
int shared_global = 3;

int other_sum(void)
{
	return other_static + shared_global;
}
