"""A PINQ source in zCDP mode through the service: Gaussian counts and sums charged rho, pure
queries charged ε²/2, the budget in rho, refusals before any charge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dprivacy.errors import BudgetExceededError, ValidationError
from dprivacy.remote import connect
from dprivacy.service.config import load_config
from dprivacy.service.serve import ServiceThread
from tests.service.conftest import KEYS, people, write_service


@pytest.fixture
def zcdp_service(tmp_path: Path):
    # 0.3 s deadlines (was 1.0): far above a query's work on 200 rows; the answers are checked
    cfg = write_service(tmp_path / "svc", people(), query_seconds=0.3)
    cfg.write_text(cfg.read_text() + """
[[source]]
name = "visits_z"
path = "visits.parquet"
kind = "pinq"
budget = 1.0
notion = "zcdp"
""")
    srv = ServiceThread(load_config(cfg))
    yield srv
    srv.stop()


def test_zcdp_source_answers_gaussian_queries_and_charges_rho(zcdp_service):
    s = connect(zcdp_service.url, key=KEYS["alice"])
    v = s.table("visits_z")                                   # 200 rows, city x / y
    n = v.gaussian_count(rho=0.25)                            # sigma = sqrt(2)
    assert v.remaining_budget() == pytest.approx(0.75)
    assert abs(n - 200) < 20 and n == round(n)                # discrete Gaussian: an integer
    v.gaussian_sum(0.125, "age", 0, 90)
    assert v.remaining_budget() == pytest.approx(0.625)
    v.noisy_count(eps=0.5)                                    # pure: 0.5^2 / 2
    assert v.remaining_budget() == pytest.approx(0.5)
    with pytest.raises(BudgetExceededError):
        v.gaussian_count(rho=0.6)
    with pytest.raises(ValidationError):
        v.gaussian_count(rho=-1)
    assert v.remaining_budget() == pytest.approx(0.5)
    pure = s.table("visits")                                  # a pure source refuses them
    with pytest.raises(ValidationError):
        pure.gaussian_count(rho=0.1)
    assert pure.remaining_budget() == pytest.approx(1.0)


@pytest.mark.slow
def test_zcdp_remote_noise_has_the_promised_sigma(tmp_path: Path):
    # each answer waits for its deadline: 0.3 s (was 1.0) is still far above a count's work on
    # 200 rows, and an overrun (the default answer, centred on 0) is checked below
    cfg = write_service(tmp_path / "svc", people(), query_seconds=0.3)
    cfg.write_text(cfg.read_text() + """
[[source]]
name = "visits_z"
path = "visits.parquet"
kind = "pinq"
budget = 1000.0
notion = "zcdp"
""")
    srv = ServiceThread(load_config(cfg))
    try:
        v = connect(srv.url, key=KEYS["alice"]).table("visits_z")
        ys = [v.gaussian_count(rho=0.02) for _ in range(20)]   # sigma = 5
        z = [(y - 200) / 5.0 for y in ys]
        assert stats.kstest(z, "norm").pvalue > 1e-4
        # and the spread itself: sum z^2 ~ chi2(20) within its 5e-5 and 1 - 5e-5 quantiles
        # (false failure 1e-4); a sigma 2x too large fails with probability 0.85, sigma =
        # sqrt(2) (rho taken for 1/sigma^2) with probability > 0.999
        chi = float(np.sum(np.square(z)))
        assert stats.chi2.ppf(5e-5, 20) < chi < stats.chi2.ppf(1 - 5e-5, 20), chi
        assert srv.runner.overruns == 0
    finally:
        srv.stop()


def test_notion_is_checked_in_the_config(tmp_path: Path):
    from dprivacy.errors import ConfigError

    cfg = write_service(tmp_path / "svc", people())
    text = cfg.read_text()
    cfg.write_text(text.replace('kind = "proper"', 'kind = "proper"\nnotion = "zcdp"', 1))
    with pytest.raises(ConfigError, match="notion is for PINQ"):
        load_config(cfg)
    cfg.write_text(text + '\n[[source]]\nname = "z"\npath = "visits.parquet"\nkind = "pinq"\n'
                   'budget = 1.0\nnotion = "renyi"\n')
    with pytest.raises(ConfigError, match="notion"):
        load_config(cfg)
