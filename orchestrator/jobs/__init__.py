"""The job folder as a format: its layout, its records and how they are read and added up.

Below `service/` (which runs jobs and writes their folders) and `report/` (which reads them),
so both use one definition of what a job folder holds and what its trials add up to:

- `store`: the folder claimed and locked, files replaced whole (`config.json`, `job.json`,
  a queued-cancel's `result.json`), `.lock`;
- `config`: `config.json` (`JobConfigFile`: what the job was asked to do, no secret values);
- `record`: `job.json` (`JobRecord`), retry `Chain`s;
- `results`: every trial's `result.json` read back, chained by `retry_of`, matched to the
  job's (task, attempt) pairs, and what a resume runs again;
- `aggregates`: which samples count, mean reward, pass@k (`summarize`, `tally`);
- `ids`: readable job ids.
"""
