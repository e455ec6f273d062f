/* Faults on a data access whose address comes from a memory operand of the kind named by
   argv[1]: base+index*scale+displacement, a negative 32-bit displacement from a base,
   %fs-relative, %rip-relative, or a 64-bit absolute address (movabs). With "signal" it runs a
   signal handler instead. */
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t got;

void on_signal(int sig) { got = sig; }

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "signal") == 0) {
		signal(SIGUSR1, on_signal);
		raise(SIGUSR1);
		return got == SIGUSR1 ? 0 : 1;
	}
	if (strcmp(argv[1], "sib") == 0)
		__asm__ volatile("movq $0x1000, %%rbx\n\tmovq $3, %%rcx\n\tmovb $1, 0x10(%%rbx,%%rcx,8)"
				 ::: "rbx", "rcx", "memory");
	if (strcmp(argv[1], "neg") == 0)
		__asm__ volatile("movq $0x10000000, %%rbx\n\tmovb $1, -0x200(%%rbx)" ::: "rbx", "memory");
	if (strcmp(argv[1], "moffs") == 0)
		__asm__ volatile("movabsb 0x100000000000, %%al" ::: "rax", "memory");
	if (strcmp(argv[1], "fs") == 0)
		__asm__ volatile("movq %%fs:-0x10000000, %%rax" ::: "rax", "memory");
	if (strcmp(argv[1], "rip") == 0)
		__asm__ volatile("movb $1, 0x40000000(%%rip)" ::: "memory");
	return 1;
}
