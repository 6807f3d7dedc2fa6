"""What the train step does on the cluster: the objects it reads and writes, how it judges a training job, and when
a person has stopped the workflow (steps/train_job.py, steps/release_train_jobs.py)."""
