from control.model import Experiment, Flow, Stage, TrialStage, Workload


def test_ports_are_sender_then_receiver_sides() -> None:
    workload = Workload(num_hosts=4, link_bps=1e9, experiments=())
    assert workload.num_ports == 8
    assert workload.sender_port(3) == 3
    assert workload.receiver_port(0) == 4


def test_stage_bytes_count_every_iteration() -> None:
    trial = TrialStage(
        trial_id=0, iterations=3, compute_s=0.1, sync_flows=(Flow(0, 1, 10), Flow(1, 0, 5))
    )
    stage = Stage(stage_id=0, trials=(trial, trial))
    experiment = Experiment(experiment_id=7, arrival_s=0.0, stages=(stage, stage))
    assert trial.sync_bytes == 15
    assert stage.total_bytes == 90
    assert experiment.total_bytes == 180
