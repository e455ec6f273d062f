/* A library the dlmain test program loads at run time (dlopen). */
int plugin_value = 7;

int plugin_compute(int x)
{
	int y = x * plugin_value; /* MARK:plugin-compute */
	return y + 1;
}
