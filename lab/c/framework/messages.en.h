/* messages.h: the texts verify prints (English). Do not edit. */
#ifndef MESSAGES_H
#define MESSAGES_H

#define MSG_TEST1 "PE(0, d) is 0 at every even d and 1 at every odd d (hidden_dim 8, 64, 512)"
#define MSG_TEST2 "PE(1, 0) = sin 1, PE(1, 1) = cos 1, and a 64 x 64 table matches the formula"
#define MSG_TEST3 "one token at different positions: different rows, each = token row + PE"
#define MSG_TEST4 "different tokens at one position, UNK for ids out of range, -1 for NULL"

#define MSG_GOT "%s: expected %.7g, got %.7g"
#define MSG_SAME_ROWS "rows %d and %d hold the same values although the positions differ"
#define MSG_NOT_WRITTEN "%s was not written: expected %.7g (token row %.7g + PE %.7g), got %.7g, the value verify put there"
#define MSG_RETURNED "%s returned %d, expected %d"
#define MSG_TOUCHED "%s changed output[%d] although it must write nothing"
#define MSG_SIGNAL "the test was stopped by signal %s: a crash in the student code"
#define MSG_TIMEOUT "the test did not finish within %d s (an endless loop?)"
#define MSG_NO_CHILD "could not start the test in a child process"
#define MSG_EXITED "the test's process ended with exit status %d before the test finished: does the student code call exit() or _exit()?"
#define MSG_LEFT_RUNNING "the student code started a process (fork?) that was still running when the test ended; verify stopped it"
#define MSG_PRINTED "what the student code printed during this test:"
#define MSG_NOT_SHOWN "... and %lu more bytes, not shown"

#define MSG_LOOK "look at: "
#define MSG_LOOK1 "student_pe_sinusoidal: at pos 0 every even dim is sin(0) = 0 and every odd dim cos(0) = 1"
#define MSG_LOOK2 "student_pe_sinusoidal: sin at even dims, cos at odd ones; denominator 10000^(2i/hidden_dim) with i = dim/2"
#define MSG_LOOK3 "student_embedding_forward: add student_pe_sinusoidal(pos, d, hidden_dim) to every value of row pos"
#define MSG_LOOK4 "student_embedding_forward: read row token_ids[pos] (row unk_id when out of range) and check the arguments first"
#define MSG_LOOK_LOOP "student_embedding_forward: its main loop must write every output[pos * hidden_dim + d]"

#define MSG_ALL_PASSED "All tests passed!"
#define MSG_SOME_FAILED "%d of 4 tests failed; TASK.md's troubleshooting table says where to look."

#endif
