/* slotfault: a move between a register and a frame slot (through %rbp) whose slot the
 * process may not access. "null" loads through a null %rbp; "rodata" stores into a const
 * object. Both must fault (SIGSEGV) when they run, however a debugger resumes them. */
#include <stdio.h>
#include <string.h>

const int frozen = 5;

int main(int argc, char **argv)
{
	int got = 0;
	if (argc > 1 && strcmp(argv[1], "null") == 0) {
		__asm__ volatile("push %%rbp\n\t"
				 "xor %%ebp, %%ebp\n\t"
				 ".globl slot_null_load\n"
				 "slot_null_load:\n\t"
				 "mov 0x0(%%rbp), %%eax\n\t"
				 "pop %%rbp\n\t"
				 "mov %%eax, %0"
				 : "=r"(got)
				 :
				 : "rax", "memory");
	} else {
		__asm__ volatile("push %%rbp\n\t"
				 "lea frozen(%%rip), %%rbp\n\t"
				 "mov $7, %%eax\n\t"
				 ".globl slot_rodata_store\n"
				 "slot_rodata_store:\n\t"
				 "mov %%eax, 0x0(%%rbp)\n\t"
				 "pop %%rbp"
				 :
				 :
				 : "rax", "memory");
	}
	printf("no fault: got %d, frozen %d\n", got, *(volatile const int *)&frozen);
	return 0;
}
