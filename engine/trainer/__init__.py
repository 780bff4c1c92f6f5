"""The Trainer and what it needs beyond a task: the loop every fine-tune and every training compression
runs (loop), distillation (distill: a student from its teacher; kd: the task's distillation loss), and a
finished job's model opened as a teacher or as the source of a variant or export (source).
"""
