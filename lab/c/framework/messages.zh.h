/* messages.h：verify 打印的文字（中文）。不要修改。 */
#ifndef MESSAGES_H
#define MESSAGES_H

#define MSG_TEST1 "PE(0, d) 在每个偶数维为 0、每个奇数维为 1（hidden_dim 8、64、512）"
#define MSG_TEST2 "PE(1, 0) = sin 1，PE(1, 1) = cos 1，64 x 64 的整张表符合公式"
#define MSG_TEST3 "同一个 token 在不同位置：各行不同，且每行 = token 行 + PE"
#define MSG_TEST4 "同一位置的不同 token、越界 id 用 UNK、NULL 返回 -1"

#define MSG_GOT "%s：期望 %.7g，得到 %.7g"
#define MSG_SAME_ROWS "第 %d 行和第 %d 行的值相同，但它们的位置不同"
#define MSG_NOT_WRITTEN "%s 没有被写入：期望 %.7g（token 行 %.7g + PE %.7g），得到 %.7g，即 verify 预先放进去的值"
#define MSG_RETURNED "%s 返回了 %d，期望 %d"
#define MSG_TOUCHED "%s 改动了 output[%d]，但此时它应当什么也不写"
#define MSG_SIGNAL "测试被信号 %s 终止（学生代码崩溃了）"
#define MSG_TIMEOUT "测试在 %d 秒内没有结束（是不是死循环？）"
#define MSG_NO_CHILD "无法在子进程中启动测试"
#define MSG_EXITED "测试进程在测试完成之前就结束了（退出状态 %d）：学生代码是否调用了 exit() 或 _exit()？"
#define MSG_LEFT_RUNNING "学生代码启动的进程（fork？）在测试结束时仍在运行；verify 已将其终止"
#define MSG_PRINTED "学生代码在这个测试中打印的内容："
#define MSG_NOT_SHOWN "……另有 %lu 字节未显示"

#define MSG_LOOK "优先检查："
#define MSG_LOOK1 "student_pe_sinusoidal：pos = 0 时偶数维是 sin(0) = 0，奇数维是 cos(0) = 1"
#define MSG_LOOK2 "student_pe_sinusoidal：偶数维用 sin，奇数维用 cos；分母是 10000^(2i/hidden_dim)，其中 i = dim/2"
#define MSG_LOOK3 "student_embedding_forward：给第 pos 行的每个值加上 student_pe_sinusoidal(pos, d, hidden_dim)"
#define MSG_LOOK4 "student_embedding_forward：读取第 token_ids[pos] 行（越界时读第 unk_id 行），并先检查参数"
#define MSG_LOOK_LOOP "student_embedding_forward：主循环必须写出每一个 output[pos * hidden_dim + d]"

#define MSG_ALL_PASSED "All tests passed!"
#define MSG_SOME_FAILED "4 个测试中有 %d 个失败；出错时先查 TASK.md 里的排查表。"

#endif
