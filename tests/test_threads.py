"""The one thread budget: where its default comes from, what it refuses, oversubscription."""
import pytest

from kernels import threads


@pytest.fixture
def environment(monkeypatch):
    """Neither variable set, four CPUs; ``environment(NAME=value, ...)`` sets some."""
    for variable in threads.BUDGET_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(threads, "available_cpus", lambda: 4)

    def set_variables(**values):
        for variable, value in values.items():
            monkeypatch.setenv(variable, value)

    return set_variables


def test_default_is_every_available_cpu(environment):
    assert threads.default_budget() == 4


@pytest.mark.parametrize("omp, expected", [("1", 1), ("3", 3), (" 2 ", 2), ("2,1", 2), ("6, 2, 1", 6)])
def test_omp_num_threads_first_entry_sets_the_default(environment, omp, expected):
    environment(OMP_NUM_THREADS=omp)
    assert threads.default_budget() == expected


def test_attnbench_threads_wins_over_omp_num_threads(environment):
    environment(ATTNBENCH_THREADS="3", OMP_NUM_THREADS="1")
    assert threads.default_budget() == 3


def test_empty_variables_count_as_unset(environment):
    environment(ATTNBENCH_THREADS="", OMP_NUM_THREADS=" ")
    assert threads.default_budget() == 4


@pytest.mark.parametrize("variable", threads.BUDGET_VARIABLES)
@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5", "four", ",2"])
def test_garbage_or_zero_is_a_value_error_naming_the_variable_and_value(environment, variable, value):
    environment(**{variable: value})
    with pytest.raises(ValueError, match=rf"{variable}='{value}'.*whole number >= 1"):
        threads.default_budget()


def test_budget_read_from_a_bad_variable_raises_and_caches_nothing(environment, monkeypatch):
    monkeypatch.setattr(threads, "_budget", None)
    environment(ATTNBENCH_THREADS="lots")
    with pytest.raises(ValueError, match="ATTNBENCH_THREADS='lots'"):
        threads.budget()
    assert threads._budget is None


@pytest.mark.parametrize("value", [0, -1, 2.5, "abc", True, None])
def test_set_budget_refuses_anything_but_a_whole_number_from_1(value):
    before = threads.budget()
    with pytest.raises(ValueError, match=r"thread budget .*whole number >= 1"):
        threads.set_budget(value)
    assert threads.budget() == before


def test_a_budget_above_the_cpu_count_is_allowed_and_described(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    with threads.using_budget(8):
        assert threads.budget() == 8
        assert threads.oversubscribed()
        assert threads.describe() == "8 threads, oversubscribed: 2 CPUs"
    with threads.using_budget(1):
        assert not threads.oversubscribed()
        assert threads.describe() == "1 thread"
    with threads.using_budget("2"):
        assert threads.describe() == "2 threads"
