"""What a person sees (``python -m optimizers.protocol.report``): the HTML report (``page``, its
data, plots and trust panels, ``idle`` for panels with nothing to say), one page per job
(``job_page`` from ``job_data``, with ``job_diff`` and ``job_svg``, linked by ``job_links``) and one
job's W&B tracking (``tracking``, with the job page's story in ``tracking_job``).

May import: the core of ``optimizers``, ``optimizers.protocol.grid`` and ``optimizers.protocol.aggregate``.
"""
